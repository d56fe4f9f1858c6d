//! The two plugins' descriptors, the symbols memflow's `Inventory` looks
//! for: what memflow's `#[connector]` and `#[os]` macros would write, with
//! one difference, the logger.
//!
//! memflow hands a plugin, at each create, a logger that its library
//! context owns (`LibContext::get_logger`), and the plugin installs it in
//! its own copy of the `log` crate, which keeps the first logger it is
//! given for as long as the plugin stays loaded. A program with two
//! inventories (or two library contexts of this file) loads the plugin
//! once: when the first context goes, its logger is freed while the
//! plugin, still loaded for the second, logs through it (a crash, seen in
//! `tests/plugin_inventory.rs`' parallel tests). The plugin logs instead
//! through a copy it owns of the first logger it is given, made of the
//! host's function pointers, and each host logger still learns how to set
//! the plugin's level.

use std::sync::OnceLock;

use memflow::abi_stable::StableAbi;
use memflow::cglue::{COption, CSliceRef};
use memflow::plugins::connector::{ConnectorDescriptor, MuConnectorInstanceArcBox};
use memflow::plugins::os::{MuOsInstanceArcBox, OsDescriptor};
use memflow::plugins::{self, LoadableConnector, LoadableOs, PluginLogger};
use memflow::prelude::v1::*;

use crate::os_plugin;

/// The plugin's own copy of the first logger a host gave it.
static LOGGER: OnceLock<PluginLogger> = OnceLock::new();

/// The logger the plugin installs: its own copy of `host`'s, which lives
/// as long as the plugin.
fn lasting(host: Option<&'static PluginLogger>) -> Option<&'static PluginLogger> {
    let host = host?;
    // SAFETY: `host` is a valid logger for this call. A `PluginLogger` is
    // plain data (a level, three function pointers into the host program,
    // an atomic pointer) with no `Drop`, so a bitwise copy is a value of
    // its own; the host's functions outlive the plugin, which the host
    // loaded.
    Some(LOGGER.get_or_init(|| unsafe { std::ptr::read(host) }))
}

/// After a create: the host's logger learns the plugin's level setter
/// (its `init` stores it there; the `log` crate keeps the plugin's own
/// copy, installed first) and sets the plugin's level to its own, as
/// memflow's macros would.
fn tell_host(host: Option<&'static PluginLogger>) {
    if let Some(host) = host {
        let _ = host.init();
    }
}

/// The `leechcore` connector.
#[doc(hidden)]
#[no_mangle]
pub static MEMFLOW_CONNECTOR_LEECHCORE: ConnectorDescriptor = ConnectorDescriptor {
    plugin_version: plugins::MEMFLOW_PLUGIN_VERSION,
    accept_input: false,
    input_layout: <<LoadableConnector as Loadable>::CInputArg as StableAbi>::LAYOUT,
    output_layout: <<LoadableConnector as Loadable>::Instance as StableAbi>::LAYOUT,
    name: CSliceRef::from_str("leechcore"),
    version: CSliceRef::from_str(env!("CARGO_PKG_VERSION")),
    description: CSliceRef::from_str(env!("CARGO_PKG_DESCRIPTION")),
    help_callback: Some(connector_help),
    target_list_callback: Some(connector_targets),
    create: create_connector,
};

extern "C" fn create_connector(
    args: Option<&ConnectorArgs>,
    _os: COption<OsInstanceArcBox<'static>>,
    lib: LibArc,
    logger: Option<&'static PluginLogger>,
    out: &mut MuConnectorInstanceArcBox<'static>,
) -> i32 {
    let code = plugins::wrap(args, lib, lasting(logger), out, |args, lib| {
        let connector = crate::create_connector(args)?;
        Ok(plugins::connector::create_instance(
            connector, lib, args, false,
        ))
    });
    tell_host(logger);
    code
}

extern "C" fn connector_help(mut callback: HelpCallback) {
    let _ = callback.call(crate::help().into());
}

extern "C" fn connector_targets(mut callback: TargetCallback) -> i32 {
    crate::target_list()
        .map(|targets| {
            targets
                .into_iter()
                .take_while(|t| callback.call(t.clone()))
                .for_each(|_| ());
        })
        .into_int_result()
}

/// The `linux_btf` OS plugin.
#[doc(hidden)]
#[no_mangle]
pub static MEMFLOW_OS_LINUX_BTF: OsDescriptor = OsDescriptor {
    plugin_version: plugins::MEMFLOW_PLUGIN_VERSION,
    accept_input: true,
    input_layout: <<LoadableOs as Loadable>::CInputArg as StableAbi>::LAYOUT,
    output_layout: <<LoadableOs as Loadable>::Instance as StableAbi>::LAYOUT,
    name: CSliceRef::from_str(os_plugin::NAME),
    version: CSliceRef::from_str(env!("CARGO_PKG_VERSION")),
    description: CSliceRef::from_str(env!("CARGO_PKG_DESCRIPTION")),
    help_callback: Some(os_help),
    target_list_callback: None,
    create: create_os,
};

extern "C" fn create_os(
    args: Option<&OsArgs>,
    connector: COption<ConnectorInstanceArcBox<'static>>,
    lib: LibArc,
    logger: Option<&'static PluginLogger>,
    out: &mut MuOsInstanceArcBox<'static>,
) -> i32 {
    let connector = Option::from(connector);
    let code = plugins::wrap_with_input(
        args,
        connector,
        lib,
        lasting(logger),
        out,
        os_plugin::create_os,
    );
    tell_host(logger);
    code
}

extern "C" fn os_help(mut callback: HelpCallback) {
    let _ = callback.call(os_plugin::help().into());
}

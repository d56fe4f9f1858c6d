//! The committed header `include/leechio.h` is what cbindgen makes of the
//! code now. With `LEECHIO_WRITE_HEADER=1` (what `make header` sets) the
//! test writes the header instead of comparing it.

use std::path::Path;

#[test]
fn committed_header_matches_the_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen parses ffi/src")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = dir.join("include/leechio.h");
    if std::env::var_os("LEECHIO_WRITE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write include/leechio.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "ffi/include/leechio.h is out of date (first difference at line {}); \
             run `make header` and commit the result",
            line + 1
        );
    }
}

//! The documentation names only what is there: every repository path it
//! mentions exists, every relative link leads to a file (and heading)
//! that exists, every code block says its language, every page with Rust
//! examples is compiled as doctests, and no page speaks of the project's
//! issue tracker, which readers of the docs cannot see.
//!
//! The pages: every `*.md` at the repository root and in `docs/` and
//! `ffi/`. Paths in prose are from the repository root (`src/lib.rs`);
//! links are relative to the page (`../src/lib.rs` from `docs/`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The folders a path named in the docs starts with.
const TOP_FOLDERS: [&str; 11] = [
    "src/",
    "cli/",
    "ffi/",
    "connector/",
    "tests/",
    "scripts/",
    "fuzz/",
    "docs/",
    ".ci/",
    "benches/",
    "leechcore-sys/",
];

/// The file names checked: source, scripts, docs, manifests.
const EXTENSIONS: [&str; 7] = [".rs", ".sh", ".c", ".h", ".py", ".md", ".toml"];

/// Folders the docs name that git does not hold: what `cargo fuzz` grows.
const MADE_BY_RUNS: [&str; 2] = ["fuzz/corpus/", "fuzz/artifacts/"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every page of the docs, by its path from the repository root.
fn pages() -> Vec<(String, String)> {
    let mut pages = Vec::new();
    for folder in ["", "docs", "ffi"] {
        let dir = root().join(folder);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                let name = path.strip_prefix(root()).unwrap().display().to_string();
                pages.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    pages.sort();
    assert!(
        pages.iter().any(|(p, _)| p == "README.md"),
        "no README.md at {}",
        root().display()
    );
    pages
}

/// The path-like words of `text`: runs of the characters paths are made
/// of, without a leading `./` or `../` and without the punctuation that
/// ends a sentence.
fn path_words(text: &str) -> impl Iterator<Item = &str> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_.-/".contains(c);
    text.split(move |c: char| !is_path_char(c)).map(|word| {
        let mut word = word.trim_end_matches(['.', ',', ':', ';']);
        while let Some(rest) = word.strip_prefix("../").or(word.strip_prefix("./")) {
            word = rest;
        }
        word
    })
}

/// The repository paths `text` names that do not exist: files with one of
/// [`EXTENSIONS`], and folders (written with a trailing `/`), under one of
/// [`TOP_FOLDERS`], from the root or from the page's own `folder` (where
/// `ffi/README.md` names `tests/c/`).
fn missing_paths(text: &str, root: &Path, folder: &Path) -> Vec<String> {
    let mut missing = BTreeSet::new();
    for word in path_words(text) {
        let Some(top) = TOP_FOLDERS.iter().find(|t| word.starts_with(*t)) else {
            continue;
        };
        let is_folder = word.ends_with('/');
        let named = is_folder || EXTENSIONS.iter().any(|e| word.ends_with(e));
        let made_by_runs = MADE_BY_RUNS.iter().any(|m| word.starts_with(m));
        if !named || (is_folder && (word == *top || made_by_runs)) {
            continue;
        }
        let there = [root.join(word), root.join(folder).join(word)]
            .iter()
            .any(|path| match word.ends_with('/') {
                true => path.is_dir(),
                false => path.is_file(),
            });
        if !there {
            missing.insert(word.to_string());
        }
    }
    missing.into_iter().collect()
}

/// The anchor GitHub gives a heading: lower case, spaces as hyphens, and
/// nothing else but letters, digits, `-` and `_`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The lines of `text` outside code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut in_code = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code {
            lines.push(line);
        }
    }
    lines
}

/// The anchors of `text`'s headings (a repeated one gets `-1`, `-2`, …).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let base = anchor(heading.trim_start_matches('#'));
        let mut name = base.clone();
        let mut n = 0;
        while seen.contains(&name) {
            n += 1;
            name = format!("{base}-{n}");
        }
        seen.insert(name);
    }
    seen
}

/// The targets of `text`'s inline links, `[words](target)`, outside code.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else {
                break;
            };
            targets.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    targets
}

/// What is wrong with the relative links of `page` (its path from the
/// root) whose text is `text`.
fn broken_links(page: &str, text: &str, root: &Path) -> Vec<String> {
    let folder = Path::new(page).parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for target in link_targets(text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (file, fragment) = match target.split_once('#') {
            Some((file, fragment)) => (file, Some(fragment)),
            None => (target.as_str(), None),
        };
        let path = match file {
            "" => root.join(page),
            file => root.join(folder).join(file),
        };
        if !path.exists() {
            broken.push(format!("{target}: no such file"));
            continue;
        }
        if let Some(fragment) = fragment {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if !anchors(&text).contains(fragment) {
                broken.push(format!("{target}: no such heading"));
            }
        }
    }
    broken
}

/// The code blocks of `text` that open with no language (rustdoc would
/// take them for Rust).
fn untagged_blocks(text: &str) -> Vec<usize> {
    let mut in_code = false;
    let mut untagged = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some(tag) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        if !in_code && tag.trim().is_empty() {
            untagged.push(n + 1);
        }
        in_code = !in_code;
    }
    untagged
}

/// The lines of `text` that speak of an issue (the project's tracker);
/// LeechCore's own threads, linked on the same line, are another matter.
fn tracker_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| !line.contains("github.com/ufrisk/"))
        .filter(|line| {
            let lower = line.to_lowercase();
            lower
                .split(|c: char| !c.is_ascii_alphanumeric())
                .any(|w| w == "issue" || w == "issues")
        })
        .map(str::to_string)
        .collect()
}

/// Asserts that `wrong` finds nothing in any page (it is given the page's
/// path from the root and its text); else fails with `what`, then each
/// finding after its page.
fn assert_no_page_has<T: std::fmt::Display>(what: &str, wrong: impl Fn(&str, &str) -> Vec<T>) {
    let found: Vec<String> = pages()
        .iter()
        .flat_map(|(page, text)| {
            wrong(page, text)
                .into_iter()
                .map(move |w| format!("{page}: {w}"))
        })
        .collect();
    assert!(found.is_empty(), "{what}:\n{}", found.join("\n"));
}

#[test]
fn every_path_the_docs_name_exists() {
    assert_no_page_has("paths that do not exist", |page, text| {
        let folder = Path::new(page).parent().unwrap_or(Path::new(""));
        missing_paths(text, &root(), folder)
    });
}

#[test]
fn every_relative_link_leads_somewhere() {
    assert_no_page_has("broken links", |page, text| {
        broken_links(page, text, &root())
    });
}

#[test]
fn every_code_block_names_its_language() {
    assert_no_page_has(
        "code blocks without a language (sh, text, rust, …), by line",
        |_, text| untagged_blocks(text),
    );
}

#[test]
fn every_page_with_rust_examples_is_compiled_as_doctests() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let wrong: Vec<String> = pages()
        .into_iter()
        .filter(|(page, _)| !page.starts_with("ffi/"))
        .filter(|(_, text)| text.lines().any(|l| l.trim_start().starts_with("```rust")))
        .map(|(page, _)| page)
        .filter(|page| !lib.contains(&format!("include_str!(\"../{page}\")")))
        .collect();
    assert!(
        wrong.is_empty(),
        "pages with Rust examples that src/lib.rs does not include as doctests:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_page_speaks_of_the_issue_tracker() {
    assert_no_page_has(
        "the docs speak of issues, which their readers cannot see",
        |_, text| tracker_lines(text),
    );
}

/// The checks catch what they are for, on made-up text and a made-up tree.
#[test]
fn the_checks_catch_wrong_paths_links_blocks_and_issues() {
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tree.path().join("src/engine")).unwrap();
    std::fs::write(tree.path().join("src/lib.rs"), "").unwrap();
    std::fs::create_dir_all(tree.path().join("docs")).unwrap();
    std::fs::write(
        tree.path().join("docs/cli.md"),
        "# The command line\n## Exit codes\n",
    )
    .unwrap();

    let text = "See `src/lib.rs`, [the engine](../src/engine/) and src/lib.rs. \
                Not `src/targets.rs`, nor src/engine/queue/, nor cli/src/gone.rs; \
                `fuzz/corpus/memory_map/` is made by runs; /proc/PID/maps and \
                target/leechcore/leechcore.so are not the repository's.";
    assert_eq!(
        missing_paths(text, tree.path(), Path::new("")),
        ["cli/src/gone.rs", "src/engine/queue/", "src/targets.rs"]
    );
    // From a page in docs/, a path may also be the folder's own.
    let own = "`docs/cli.md`, `cli.md`, src/lib.rs and src/cli.md";
    assert_eq!(
        missing_paths(own, tree.path(), Path::new("docs")),
        ["src/cli.md"]
    );

    let links = "[a](cli.md) [b](cli.md#exit-codes) [c](cli.md#signals) [d](gone.md) \
                 [e](#the-command-line) [f](https://example.com/x.md) [g](../src/lib.rs)";
    let page = format!("# The command line\n{links}\n```sh\n[h](nothing.md)\n```\n");
    assert_eq!(
        broken_links("docs/cli.md", &page, tree.path()),
        ["cli.md#signals: no such heading", "gone.md: no such file"]
    );
    assert_eq!(
        anchor("Where `leechcore.so` is looked for"),
        "where-leechcoreso-is-looked-for"
    );
    assert_eq!(
        anchors("# A\n## A\n```sh\n# not a heading\n```\n"),
        BTreeSet::from(["a".to_string(), "a-1".to_string()])
    );

    assert_eq!(
        untagged_blocks("```sh\nls\n```\n```\nfn x() {}\n```\n"),
        [4]
    );

    let issues = "As the issue says.\nSee issue 37.\nissues show 38\n\
                  A request NotIssued is issued later.\n\
                  LeechCore's [issue 12](https://github.com/ufrisk/LeechCore/issues/12).";
    assert_eq!(
        tracker_lines(issues),
        ["As the issue says.", "See issue 37.", "issues show 38"]
    );
}

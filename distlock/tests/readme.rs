//! The Rust snippets of the README and of the guides under `docs/` are complete programs a
//! user can paste into a new project: this test compiles each one (`cargo check`, warnings
//! denied), unchanged, in a new crate outside the repository whose `[dependencies]` are
//! the README's own, with `distlock` pointed at this checkout.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the facade lives in the workspace")
        .to_path_buf()
}

/// The bodies of the README's fenced blocks whose info string starts with `lang`.
fn fenced(readme: &str, lang: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in readme.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) if info.split(',').next() == Some(lang) => {
                current = Some(String::new());
            }
            (Some(_), Some("")) => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The Markdown files under `dir`, in a stable order.
fn guides(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let entries = std::fs::read_dir(dir).expect("the docs folder");
    for entry in entries {
        let path = entry.expect("a docs entry").path();
        if path.is_dir() {
            found.extend(guides(&path));
        } else if path.extension().is_some_and(|ext| ext == "md") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The README's `[dependencies]` block, with `distlock` taken from this checkout.
fn manifest(readme: &str, root: &Path) -> String {
    let toml = fenced(readme, "toml");
    let dependencies = toml
        .iter()
        .find(|block| block.contains("[dependencies]"))
        .expect("the README shows its dependency lines");
    let facade = root.join("distlock");
    let dependencies: String = dependencies
        .lines()
        .map(
            |line| match line.strip_prefix("distlock = { version = \"0.1\"") {
                Some(rest) => format!("distlock = {{ path = {:?}{rest}\n", facade.display()),
                None => format!("{line}\n"),
            },
        )
        .collect();
    assert!(
        dependencies.contains("path ="),
        "the README's distlock line changed shape:\n{dependencies}"
    );
    format!(
        "[package]\nname = \"readme-snippets\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n{dependencies}\n[workspace]\n"
    )
}

#[test]
fn every_readme_snippet_compiles_unchanged_in_a_new_crate() {
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("the README");
    let mut snippets = fenced(&readme, "rust");
    assert!(
        snippets.len() >= 3,
        "found {} Rust snippets in the README",
        snippets.len()
    );
    for guide in guides(&root.join("docs")) {
        let text = std::fs::read_to_string(&guide).expect("a guide");
        snippets.extend(fenced(&text, "rust"));
    }
    assert!(
        snippets.len() >= 10,
        "found {} Rust snippets in the README and the guides",
        snippets.len()
    );
    for (i, snippet) in snippets.iter().enumerate() {
        assert!(
            !snippet
                .lines()
                .any(|line| line == "#" || line.starts_with("# ")),
            "snippet {i} hides lines; a reader could not paste it:\n{snippet}"
        );
        assert!(
            snippet.contains("fn main"),
            "snippet {i} is no program:\n{snippet}"
        );
        // The README's default server, spelt in two pieces: this test connects nowhere,
        // and no test source names the port of a server it did not start.
        let default_server = concat!("\"redis://127.0.0.1:", "6379\"");
        assert!(
            !snippet.contains(default_server) || snippet.contains("REDIS_URL"),
            "snippet {i} ignores REDIS_URL (the demo and the other snippets honour it):\n{snippet}"
        );
    }
    let project = tempfile::tempdir().expect("a temporary directory");
    let bins = project.path().join("src/bin");
    std::fs::create_dir_all(&bins).expect("src/bin");
    std::fs::write(project.path().join("Cargo.toml"), manifest(&readme, &root))
        .expect("Cargo.toml");
    // The workspace's lock file: the same dependency versions, no network needed.
    std::fs::copy(root.join("Cargo.lock"), project.path().join("Cargo.lock")).expect("Cargo.lock");
    for (i, snippet) in snippets.iter().enumerate() {
        std::fs::write(bins.join(format!("snippet_{i}.rs")), snippet).expect("a snippet");
    }
    // A target directory of its own: the one of this test run is locked by it.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme-snippets");
    // `check`: what a reader pasting a snippet sees (types, borrows, missing items), without
    // generating code for every dependency a second time.
    let output = Command::new(env!("CARGO"))
        .args(["check", "--offline", "--bins", "--quiet"])
        .current_dir(project.path())
        .env("CARGO_TARGET_DIR", &target)
        // A pasted snippet that warns (dead code, unused results) is no example to copy.
        .env("RUSTFLAGS", "-D warnings")
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "the README's snippets do not compile in a new crate:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

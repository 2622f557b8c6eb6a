//! The documents a reader follows: every relative link in the Markdown pages
//! (README, ARCHITECTURE, BENCHMARKS, `docs/`, its decision records,
//! `localstack/`) points at a
//! file that exists, and no document or source file cites the private
//! numbering of working sittings (the word "session" and a number): a reader cannot follow it;
//! a benchmark section, a decision record or a commit can be.
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The repository's Markdown pages.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "localstack/README.md"]
        .iter()
        .map(|p| root.join(p))
        .collect();
    for folder in ["docs", "docs/decisions"] {
        for entry in std::fs::read_dir(root.join(folder)).unwrap_or_else(|e| panic!("{folder}/: {e}")) {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|ext| ext == "md") {
                pages.push(path);
            }
        }
    }
    pages
}

/// The targets of `[text](target)` and `![alt](target)` in `markdown`,
/// outside fenced code blocks.
fn link_targets(markdown: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].trim().to_owned());
            rest = &after[end..];
        }
    }
    targets
}

#[test]
fn every_relative_link_in_the_documents_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        for target in link_targets(&text) {
            let path = target.split('#').next().unwrap_or_default();
            if path.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let resolved = page.parent().expect("a page's folder").join(path);
            if !resolved.exists() {
                broken.push(format!("{} -> {target}", page.display()));
            }
        }
    }
    assert!(checked >= 10, "the link finder found only {checked} relative links");
    assert!(broken.is_empty(), "links to nothing:\n{}", broken.join("\n"));
}

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if path.is_dir() {
            if !matches!(name, "target" | ".git" | "node_modules") {
                sources(&path, found);
            }
        } else if name.ends_with(".rs") || name.ends_with(".md") {
            found.push(path);
        }
    }
}

/// "session", then digits: the private label (a login or broker session
/// is never numbered in prose).
fn cites_a_sitting(line: &str) -> bool {
    let lower = line.to_lowercase();
    let mut rest = lower.as_str();
    while let Some(at) = rest.find("session") {
        let after = rest[at + "session".len()..].trim_start_matches('s');
        if after.starts_with(' ') && after[1..].starts_with(|c: char| c.is_ascii_digit()) {
            return true;
        }
        rest = &rest[at + "session".len()..];
    }
    false
}

#[test]
fn no_document_or_source_cites_a_working_sittings_number() {
    // The examples are built, so this file holds no label itself.
    let (one, range) = (format!("(BENCHMARKS.md, session {})", 13), format!("sessions {}–18", 17));
    assert!(cites_a_sitting(&one) && cites_a_sitting(&range));
    assert!(!cites_a_sitting("a login session 'ends'") && !cites_a_sitting("session_idle 1800"));
    let root = root();
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 100, "found only {} files", files.len());
    let mut cited = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&root).unwrap_or(&file).to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (number, line) in text.lines().enumerate() {
            if cites_a_sitting(line) {
                cited.push(format!("{relative}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(cited.is_empty(), "cite a benchmark section, decision record or commit instead:\n{}", cited.join("\n"));
}

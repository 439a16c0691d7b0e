//! House rules of the crate that the compiler does not hold, checked over `src/` so that
//! CONTRIBUTING.md's word on them fails `cargo test` the day it stops being true.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/` with its text, in a stable order.
fn sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                found.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let shown = path.strip_prefix(&src).unwrap_or(&path).to_path_buf();
            (shown, text)
        })
        .collect()
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// Where a file's own code ends: before the inline `mod tests` that closes it, if any.
fn code_of(text: &str) -> &str {
    match text.find("\n#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    }
}

/// Whether the top-level `mod tests {` starting at line `start` is the file's last item.
fn closes_the_file(lines: &[&str], start: usize) -> bool {
    let top_level: Vec<&str> = lines[start + 1..]
        .iter()
        .copied()
        .filter(|line| !line.is_empty() && !line.starts_with([' ', '\t']))
        .collect();
    top_level == ["}"]
}

#[test]
fn test_modules_are_an_inline_mod_tests_at_the_end_or_a_sibling_tests_rs() {
    let mut wrong = Vec::new();
    for (path, text) in sources() {
        let at = |i: usize| format!("{}:{}", path.display(), i + 1);
        if path.components().any(|c| c.as_os_str() == "tests") {
            wrong.push(format!("{}: a tests/ folder", path.display()));
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("#[path") {
                wrong.push(format!("{}: a #[path] attribute", at(i)));
            }
            if line.trim() != "#[cfg(test)]" {
                continue;
            }
            let next = lines.get(i + 1).copied().unwrap_or("");
            match next {
                "mod tests {" if closes_the_file(&lines, i + 1) => {}
                "mod tests {" => wrong.push(format!("{}: mod tests is not the last item", at(i))),
                "mod tests;" => {
                    let beside = path.with_file_name("tests.rs");
                    if !matches!(file_name(&path), "mod.rs" | "lib.rs") {
                        wrong.push(format!("{}: tests.rs is not beside the code", at(i)));
                    } else if !Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("src")
                        .join(beside)
                        .is_file()
                    {
                        wrong.push(format!("{}: no tests.rs beside it", at(i)));
                    }
                }
                other => wrong.push(format!(
                    "{}: test-only code outside mod tests: {other}",
                    at(i)
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "tests are an inline `mod tests` at the end of a file or a `tests.rs` beside its mod.rs \
         (CONTRIBUTING.md):\n{}",
        wrong.join("\n")
    );
}

/// The sibling modules that `text` (a file of the folder `folder` under `src/`) imports.
fn siblings_used(folder: &str, text: &str, siblings: &BTreeSet<String>) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let module = folder.replace('/', "::");
    for prefix in ["super::".to_owned(), format!("crate::{module}::")] {
        for (at, _) in text.match_indices(prefix.as_str()) {
            let rest = &text[at + prefix.len()..];
            // `super::name::…` or `super::{name::…, …}`.
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                None => vec![rest],
            };
            for name in names {
                let name = name.trim();
                if let Some((module, _)) = name.split_once("::") {
                    if siblings.contains(module) {
                        used.insert(module.to_owned());
                    }
                }
            }
        }
    }
    used
}

#[test]
fn no_two_files_of_a_folder_import_each_other() {
    // Folder under src/ -> file module -> its code without its inline tests.
    let mut folders: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (path, text) in sources() {
        let name = file_name(&path);
        if matches!(name, "mod.rs" | "lib.rs" | "tests.rs") {
            continue;
        }
        let folder = path
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let module = name.trim_end_matches(".rs").to_owned();
        folders
            .entry(folder)
            .or_default()
            .insert(module, code_of(&text).to_owned());
    }
    let mut circles = Vec::new();
    for (folder, files) in &folders {
        let names: BTreeSet<String> = files.keys().cloned().collect();
        let uses: BTreeMap<&String, BTreeSet<String>> = files
            .iter()
            .map(|(module, code)| (module, siblings_used(folder, code, &names)))
            .collect();
        for (module, used) in &uses {
            for other in used.iter().filter(|other| *other > *module) {
                if uses.get(other).is_some_and(|back| back.contains(*module)) {
                    circles.push(format!("src/{folder}: {module} <-> {other}"));
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "dependencies between a folder's files go one way: move what both need below both\n{}",
        circles.join("\n")
    );
}

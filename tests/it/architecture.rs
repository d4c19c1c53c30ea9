//! The code map of docs/architecture.md, enforced: which top-level module of `src/` may import
//! which (read off the `crate::` paths of its files), that the imports form no cycle, and that
//! a tool's name is written only in its own file under `src/mcp/tools/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module each file of `src/` belongs to, and the modules its code names.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let module = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // Only code: doc and line comments may name any module.
        let code: String = text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
        let deps = graph.entry(module.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let name: String = code[i + 7..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() && name != module {
                deps.insert(name);
            }
        }
    }
    graph
}

#[test]
fn every_module_imports_only_what_the_code_map_allows_and_there_is_no_cycle() {
    let graph = imports();
    let forbidden: &[(&str, &[&str])] = &[
        ("canonical", &["app", "store", "mcp", "http", "web", "cli", "startup", "registry", "config"]),
        ("store", &["app", "mcp", "http", "web", "cli", "startup", "registry", "config"]),
        ("registry", &["app", "mcp", "http", "web", "cli", "startup", "store"]),
        ("config", &["app", "mcp", "http", "web", "cli", "startup"]),
        ("error", &["app", "mcp", "http", "web", "cli", "startup"]),
        ("app", &["mcp", "http", "web", "cli", "startup", "bench"]),
        ("mcp", &["http", "web", "cli", "startup", "bench"]),
        ("http", &["cli", "startup", "bench"]),
        ("web", &["mcp", "cli", "startup", "bench"]),
    ];
    for (module, not) in forbidden {
        let deps = graph.get(*module).unwrap_or_else(|| panic!("no module {module}"));
        let wrong: Vec<_> = not.iter().filter(|n| deps.contains(**n)).collect();
        assert!(wrong.is_empty(), "{module} imports {wrong:?}, which the code map forbids");
    }
    // No cycle: a depth-first search finds no back edge.
    fn visit<'a>(m: &'a str, graph: &'a BTreeMap<String, BTreeSet<String>>, path: &mut Vec<&'a str>, done: &mut BTreeSet<&'a str>) {
        if done.contains(m) {
            return;
        }
        assert!(!path.contains(&m), "module cycle: {} → {m}", path.join(" → "));
        path.push(m);
        for dep in graph.get(m).into_iter().flatten() {
            visit(dep, graph, path, done);
        }
        path.pop();
        done.insert(m);
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        visit(module, &graph, &mut Vec::new(), &mut done);
    }
    // The HTTP side, the pages and the CLI ask the application, never the store.
    for module in ["http", "web", "cli"] {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src").join(module);
        let mut files = Vec::new();
        sources(&dir, &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let direct = text
                .match_indices(".store")
                .any(|(i, _)| text[i + 6..].chars().next().is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_')));
            assert!(!direct, "{} touches the store directly", file.display());
        }
    }
}

#[test]
fn a_tool_name_is_written_only_in_its_own_file() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let names: Vec<String> = skillpilot::mcp::tools::Tool::ALL.iter().map(|t| format!("\"{}\"", t.name())).collect();
    let mut homes: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        // Test modules may name tools as data (an audit row, a lookup).
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for name in &names {
            if code.contains(name.as_str()) {
                homes.entry(name).or_default().push(file.strip_prefix(&src).unwrap().display().to_string());
            }
        }
    }
    for name in &names {
        let found = homes.get(name.as_str()).cloned().unwrap_or_default();
        assert_eq!(found.len(), 1, "{name} is written in {found:?}");
        assert!(found[0].starts_with("mcp/tools/") && found[0] != "mcp/tools/mod.rs", "{name} lives in {}", found[0]);
    }
}

//! A toolchain-independent description of the eBPF object: its programs (symbol and section),
//! maps and globals with their sizes.

use std::fmt::Write as _;

use anyhow::{Context, Result};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

/// One line per program, map and global, sorted.
pub fn summarize(elf: &[u8]) -> Result<String> {
    let file = object::File::parse(elf).context("parsing the eBPF object")?;
    let mut lines = Vec::new();
    for symbol in file.symbols() {
        let (Ok(name), Some(index)) = (symbol.name(), symbol.section_index()) else {
            continue;
        };
        if !symbol.is_global() || name.is_empty() {
            continue;
        }
        let section = file
            .section_by_index(index)
            .ok()
            .and_then(|section| section.name().ok().map(str::to_owned))
            .unwrap_or_default();
        let line = match (symbol.kind(), section.as_str()) {
            (SymbolKind::Text, ".text") => continue,
            (SymbolKind::Text, _) => format!("program {name} in {section}"),
            (_, "maps") => format!("map {name}"),
            _ => format!("global {name} in {section} ({} bytes)", symbol.size()),
        };
        lines.push(line);
    }
    lines.sort();
    let mut out = String::new();
    for line in lines {
        let _ = writeln!(out, "  {line}");
    }
    Ok(out)
}

//! Nesting limits checked before a parser sees the bytes (the web config's YAML, a config's
//! TOML). unsafe-libyaml (under serde_yaml_ng)
//! checks every possible simple key of every open flow collection at each token: time quadratic
//! in the nesting depth (a 200 KiB file of 40,000 nested maps took 3 s, 100,000 over a minute),
//! and serde_yaml_ng's own depth limit applies only after the whole document is parsed. So the
//! depth is found first by a linear scan that knows enough YAML not to count what is not nesting:
//! quoted scalars, comments, block scalars (`|`, `>`) and brackets inside a plain scalar.
//!
//! The scan is an upper bound on the depth a parser sees (it may count a level too many for odd
//! but valid text, never too few for the nesting forms YAML has: indentation, compact `- `/`? `
//! entries and flow collections), and the limit is far above any real web config (depth 3).

/// The deepest nesting accepted in a structured input file (a web config is 3 levels deep).
pub const MAX_NESTING: usize = 64;

/// Checks that `text` (YAML) nests at most `max` levels; the error names the line.
pub fn check_yaml_nesting(text: &[u8], max: usize) -> Result<(), String> {
    let mut scan = YamlScan {
        text,
        pos: 0,
        line: 1,
        max,
        block: Vec::new(),
        flow: 0,
        block_scalar: None,
    };
    scan.run()
}

struct YamlScan<'a> {
    text: &'a [u8],
    pos: usize,
    line: usize,
    max: usize,
    /// The columns of the open block nodes, outermost first.
    block: Vec<usize>,
    /// Open flow collections (`[`, `{`).
    flow: usize,
    /// Inside a block scalar: the indentation its content must exceed.
    block_scalar: Option<usize>,
}

fn is_blank(byte: u8) -> bool {
    byte == b' ' || byte == b'\t'
}

impl YamlScan<'_> {
    fn peek(&self, at: usize) -> Option<u8> {
        self.text.get(at).copied()
    }

    /// Whether `at` ends a token: a blank, a line end or the end of the text.
    fn ends_token(&self, at: usize) -> bool {
        self.peek(at)
            .is_none_or(|byte| is_blank(byte) || byte == b'\n' || byte == b'\r')
    }

    fn check(&self) -> Result<(), String> {
        let depth = self.block.len() + self.flow;
        if depth > self.max {
            return Err(format!(
                "nested deeper than {} levels (line {})",
                self.max, self.line
            ));
        }
        Ok(())
    }

    fn line_end(&self) -> usize {
        self.text[self.pos..]
            .iter()
            .position(|&byte| byte == b'\n')
            .map_or(self.text.len(), |offset| self.pos + offset)
    }

    /// Moves past the current line's end.
    fn next_line(&mut self) {
        self.pos = self.line_end();
        if self.pos < self.text.len() {
            self.pos += 1;
            self.line += 1;
        }
    }

    fn run(&mut self) -> Result<(), String> {
        while self.pos < self.text.len() {
            if self.flow > 0 {
                self.flow_until_line_end()?;
            } else {
                self.block_line()?;
            }
        }
        Ok(())
    }

    /// One line in block context, from its start.
    fn block_line(&mut self) -> Result<(), String> {
        let start = self.pos;
        let indent = self.text[start..]
            .iter()
            .take_while(|&&byte| byte == b' ')
            .count();
        let first = self.peek(start + indent);
        let empty = first.is_none_or(|byte| byte == b'\n' || byte == b'\r');
        if let Some(scalar_indent) = self.block_scalar {
            if empty || indent > scalar_indent {
                self.next_line();
                return Ok(());
            }
            self.block_scalar = None;
        }
        if empty || first == Some(b'#') || (indent == 0 && first == Some(b'%')) {
            self.next_line();
            return Ok(());
        }
        self.pos = start + indent;
        if indent == 0 && self.document_marker() {
            self.block.clear();
            self.pos += 3;
            self.skip_blanks();
        }
        let column = self.pos - start;
        while self.block.last().is_some_and(|&open| open >= column) {
            self.block.pop();
        }
        self.block.push(column);
        self.check()?;
        // Compact entries: each `- `, `? ` or `: ` opens a node inside the one before it.
        while matches!(self.peek(self.pos), Some(b'-' | b'?' | b':'))
            && self.ends_token(self.pos + 1)
        {
            self.pos += 1;
            self.skip_blanks();
            if self.at_line_end() {
                break;
            }
            self.block.push(self.pos - start);
            self.check()?;
        }
        self.node(indent)
    }

    /// `---` or `...` at the start of a line.
    fn document_marker(&self) -> bool {
        let marker = &self.text[self.pos..];
        (marker.starts_with(b"---") || marker.starts_with(b"...")) && self.ends_token(self.pos + 3)
    }

    fn skip_blanks(&mut self) {
        while self.peek(self.pos).is_some_and(is_blank) {
            self.pos += 1;
        }
    }

    fn at_line_end(&self) -> bool {
        self.peek(self.pos)
            .is_none_or(|byte| byte == b'\n' || byte == b'\r' || byte == b'#')
    }

    /// A node in block context starting at `pos`, on a line indented `indent`: its properties,
    /// then a flow collection, a block scalar header, a quoted scalar or a plain scalar (or
    /// key, whose value is scanned in turn).
    fn node(&mut self, indent: usize) -> Result<(), String> {
        loop {
            self.skip_blanks();
            // Anchors and tags come before the node's content.
            while matches!(self.peek(self.pos), Some(b'&' | b'!')) {
                while !self.ends_token(self.pos) {
                    self.pos += 1;
                }
                self.skip_blanks();
            }
            match self.peek(self.pos) {
                None | Some(b'\n' | b'\r' | b'#') => {
                    self.next_line();
                    return Ok(());
                }
                Some(b'[' | b'{') => {
                    self.flow += 1;
                    self.pos += 1;
                    return self.check();
                }
                Some(b'|' | b'>') => {
                    self.block_scalar = Some(indent);
                    self.next_line();
                    return Ok(());
                }
                Some(quote @ (b'"' | b'\'')) => {
                    self.pos += 1;
                    self.skip_quoted(quote);
                }
                Some(_) => {}
            }
            // The rest of a plain (or quoted) scalar: a key when `: ` follows, else up to the
            // line's end or a comment. Brackets in it are text, not nesting.
            if !self.skip_to_value() {
                self.next_line();
                return Ok(());
            }
        }
    }

    /// Moves past `: ` to a mapping value on this line; false when the line has none.
    fn skip_to_value(&mut self) -> bool {
        while let Some(byte) = self.peek(self.pos) {
            match byte {
                b'\n' => return false,
                b'#' if self.pos > 0 && is_blank(self.text[self.pos - 1]) => return false,
                b':' if self.ends_token(self.pos + 1) => {
                    self.pos += 1;
                    return true;
                }
                _ => self.pos += 1,
            }
        }
        false
    }

    /// Past the closing quote (which may be lines away): `\` escapes in double quotes, `''` in
    /// single ones.
    fn skip_quoted(&mut self, quote: u8) {
        while let Some(byte) = self.peek(self.pos) {
            self.pos += 1;
            match byte {
                b'\n' => self.line += 1,
                b'\\' if quote == b'"' => {
                    if self.peek(self.pos) == Some(b'\n') {
                        self.line += 1;
                    }
                    self.pos += 1;
                }
                _ if byte == quote => {
                    if quote == b'\'' && self.peek(self.pos) == Some(b'\'') {
                        self.pos += 1;
                    } else {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// Flow context up to the end of the line (or until the outermost collection closes, after
    /// which the line goes on in block context).
    fn flow_until_line_end(&mut self) -> Result<(), String> {
        let mut after_separator = true;
        while let Some(byte) = self.peek(self.pos) {
            match byte {
                b'\n' => {
                    self.next_line();
                    return Ok(());
                }
                b'#' if after_separator || is_blank(self.text[self.pos - 1]) => {
                    self.next_line();
                    return Ok(());
                }
                b'"' | b'\'' if after_separator => {
                    self.pos += 1;
                    self.skip_quoted(byte);
                    after_separator = false;
                    continue;
                }
                b'[' | b'{' => {
                    self.flow += 1;
                    self.check()?;
                }
                b']' | b'}' => {
                    self.flow = self.flow.saturating_sub(1);
                    if self.flow == 0 {
                        self.pos += 1;
                        // `[a]: b` or a comment: what may follow a collection in block context.
                        if self.skip_to_value() {
                            let indent = self.block.first().copied().unwrap_or(0);
                            return self.node(indent);
                        }
                        self.next_line();
                        return Ok(());
                    }
                }
                _ => {}
            }
            after_separator = matches!(byte, b'[' | b'{' | b',' | b':' | b'?' | b' ' | b'\t');
            self.pos += 1;
        }
        Ok(())
    }
}

/// Checks that `text` (TOML, or JSON on its way to the TOML parser after serde_json refused it)
/// nests at most `max` levels: arrays and inline tables, plus the segments of dotted keys and
/// table headers (`a.b.c = 1` is three tables deep). The toml crate has a recursion limit, but
/// reads hundreds of thousands of dotted segments or brackets before reaching it.
pub fn check_toml_nesting(text: &[u8], max: usize) -> Result<(), String> {
    let mut scan = TomlScan {
        text,
        pos: 0,
        line: 1,
        open: Vec::new(),
        in_key: true,
        segments: 1,
        header_brackets: Some(0),
    };
    while let Some(byte) = scan.peek() {
        scan.step(byte);
        let depth = scan.open.len() + if scan.in_key { scan.segments } else { 0 };
        if depth > max {
            return Err(format!(
                "nested deeper than {max} levels (line {})",
                scan.line
            ));
        }
    }
    Ok(())
}

struct TomlScan<'a> {
    text: &'a [u8],
    pos: usize,
    line: usize,
    /// Open arrays (`[`) and inline tables (`{`) in values.
    open: Vec<u8>,
    /// In a key (or a table header), where `.` separates segments.
    in_key: bool,
    /// The current key's segments.
    segments: usize,
    /// The `[` or `[[` opening a table header: counted while only they began the line.
    header_brackets: Option<u8>,
}

impl TomlScan<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn starts_with(&self, pattern: &[u8]) -> bool {
        self.text[self.pos..].starts_with(pattern)
    }

    fn start_key(&mut self) {
        self.in_key = true;
        self.segments = 1;
    }

    fn step(&mut self, byte: u8) {
        let line_start = self.header_brackets.take();
        match byte {
            b'\n' => {
                self.line += 1;
                if self.open.is_empty() {
                    self.start_key();
                    self.header_brackets = Some(0);
                }
            }
            b' ' | b'\t' => self.header_brackets = line_start,
            // A table header's brackets are not nesting (its segments are); more than two
            // are, as in a JSON array.
            b'[' if self.open.is_empty() && line_start.is_some_and(|count| count < 2) => {
                self.header_brackets = line_start.map(|count| count + 1);
            }
            b'#' => {
                while self.peek().is_some_and(|byte| byte != b'\n') {
                    self.pos += 1;
                }
                return;
            }
            b'"' | b'\'' => {
                self.skip_string(byte);
                return;
            }
            b'.' if self.in_key => self.segments += 1,
            b'=' if self.in_key => self.in_key = false,
            b']' if self.in_key && self.open.is_empty() => {}
            b'[' | b'{' => {
                self.open.push(byte);
                if byte == b'{' {
                    self.start_key();
                }
            }
            b']' | b'}' => {
                self.open.pop();
                self.in_key = false;
            }
            b',' if self.open.last() == Some(&b'{') => self.start_key(),
            _ => {}
        }
        self.pos += 1;
    }

    /// Past a string: basic (`\` escapes) or literal, on one line or in triple quotes.
    fn skip_string(&mut self, quote: u8) {
        let triple = [quote; 3];
        let multi_line = self.starts_with(&triple);
        self.pos += if multi_line { 3 } else { 1 };
        while let Some(byte) = self.peek() {
            if byte == b'\\' && quote == b'"' {
                self.pos += 2;
                continue;
            }
            if byte == b'\n' {
                if !multi_line {
                    return;
                }
                self.line += 1;
            }
            if multi_line && self.starts_with(&triple) {
                self.pos += 3;
                return;
            }
            self.pos += 1;
            if !multi_line && byte == quote {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(text: &str, max: usize) -> bool {
        check_yaml_nesting(text.as_bytes(), max).is_ok()
    }

    /// The smallest `max` the scan accepts `text` with.
    fn depth(text: &str) -> usize {
        (0..100).find(|&max| depth_ok(text, max)).unwrap()
    }

    #[test]
    fn counts_block_flow_and_compact_nesting() {
        assert_eq!(depth("a: 1\n"), 1);
        assert_eq!(depth("a:\n  b:\n    c: 1\n"), 3);
        assert_eq!(depth("a: {b: {c: 1}}\n"), 3);
        assert_eq!(depth("a: [[[1]]]\n"), 4);
        assert_eq!(depth("- - - 1\n"), 4);
        assert_eq!(depth("- a:\n  - b\n"), 3);
        assert_eq!(depth("a:\n  b: 1\nc: 1\nd:\n  e: 1\n"), 2);
        assert_eq!(depth("{a: [1,\n  {b: 2}]}\n"), 4);
        // An upper bound: the compact entry of a complex key counts as a level of its own.
        assert_eq!(depth("? - a\n: - b\n"), 3);
    }

    #[test]
    fn what_is_not_nesting_is_not_counted() {
        // Brackets in quoted and plain scalars, comments and block scalars.
        assert_eq!(depth("a: '[[[{{{'\nb: \"[[[\\\"[[\"\n"), 1);
        assert_eq!(depth("a: x[[[[{{{{\n"), 1);
        assert_eq!(depth("a: 1 # [[[[[[\n# {{{{{{\n"), 1);
        assert_eq!(depth("a: |\n  [[[[[[\n  {{{{\n\n  ((\nb: 1\n"), 1);
        assert_eq!(depth("a: >-\n    [[[[\nb: [1]\n"), 2);
        assert_eq!(depth("a: 'it''s [[['\nb: \"multi\n  [[[ line\"\n"), 1);
        assert_eq!(depth("a: [\"]]]\", 'x]]', it's, #]]\n  1]\n"), 2);
        assert_eq!(depth("a: &anchor !!map {b: 1}\n"), 2);
        assert_eq!(depth("---\na: 1\n...\n---\nb:\n  c: 1\n"), 2);
    }

    #[test]
    fn a_web_config_loads_and_deep_nesting_is_refused_in_linear_time() {
        let config = "# access\ntls_server_config:\n  cert_file: server.crt\n  \
                      key_file: 'server.key'\n  client_auth_type: \"NoClientCert\"\n\
                      basic_auth_users:\n  prometheus: $2b$12$abc./[]{}#x\n  \
                      \"other user\": '$2y$10$xyz'\n";
        assert_eq!(depth(config), 2);
        let n = 100_000;
        let forms = [
            format!("basic_auth_users: {}1{}", "{a: ".repeat(n), "}".repeat(n)),
            format!("a: {}1{}", "[".repeat(n), "]".repeat(n)),
            format!("a:\n{}", "- ".repeat(n)),
            format!("{}1", "? ".repeat(n)),
            (0..2_000)
                .map(|i| format!("{}a{i}:\n", " ".repeat(i)))
                .collect(),
        ];
        for text in forms {
            let started = std::time::Instant::now();
            let error = check_yaml_nesting(text.as_bytes(), MAX_NESTING).unwrap_err();
            assert!(error.starts_with("nested deeper than 64 levels"), "{error}");
            assert!(started.elapsed() < std::time::Duration::from_millis(100));
        }
    }

    fn toml_depth(text: &str) -> usize {
        (0..100)
            .find(|&max| check_toml_nesting(text.as_bytes(), max).is_ok())
            .unwrap()
    }

    #[test]
    fn toml_counts_arrays_inline_tables_and_dotted_keys_only() {
        assert_eq!(toml_depth("a = 1\n"), 1);
        assert_eq!(toml_depth("a.b.c = 1.5\nd = 1979-05-27T07:32:00.999Z\n"), 3);
        assert_eq!(
            toml_depth("[polling]\nenabled = true\n[[a.b]]\nx = [1, [2]]\n"),
            2
        );
        assert_eq!(toml_depth("a = {b = {c.d = 1}, e = 2}\n"), 4);
        assert_eq!(
            toml_depth(
                r#"a = "[[[{{.\".."
b = '[[..'
"#
            ),
            1
        );
        assert_eq!(
            toml_depth("a = \"\"\"\n[[[[\n...\"\"\"\nb = '''\n{{{{'''\n"),
            1
        );
        assert_eq!(toml_depth("# [[[[ a.b.c.d\na = [ # {{{{\n  1,\n]\n"), 1);
        // A whole Relay plugins.toml.
        let plugins = "version = 1\n[[components]]\nkind = \"resource_metrics\"\n\
                       [components.config]\nmeasurement_scope = \"global\"\n\
                       [components.config.polling]\nenabled = true\ninterval_millis = 500\n";
        assert_eq!(toml_depth(plugins), 3);
    }

    #[test]
    fn deep_toml_and_json_are_refused_in_linear_time() {
        let n = 300_000;
        let forms = [
            format!("a = {}{}", "[".repeat(n), "]".repeat(n)),
            format!("{} = 1", vec!["a"; n].join(".")),
            format!("[{}]\n", vec!["a"; n].join(".")),
            format!("a = {}1{}", "{b = ".repeat(n / 4), "}".repeat(n / 4)),
            format!("{}{}", "[".repeat(n), "]".repeat(n)),
            format!("{}1{}", "{\"a\":".repeat(n / 4), "}".repeat(n / 4)),
        ];
        for text in forms {
            let started = std::time::Instant::now();
            let error = check_toml_nesting(text.as_bytes(), MAX_NESTING).unwrap_err();
            assert!(error.starts_with("nested deeper than 64 levels"), "{error}");
            assert!(started.elapsed() < std::time::Duration::from_millis(100));
        }
    }
}

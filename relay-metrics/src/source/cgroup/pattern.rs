//! Glob patterns over cgroup paths (`--cgroups`): `*` and `?` match within one path component,
//! `[abc]`, `[a-z]` and `[!x]` are character classes, and a `**` component matches any number
//! of components, none included (`/kubepods.slice/**` matches the slice and all below it).

/// One compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupPattern {
    text: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// `**`: any number of components.
    AnyDepth,
    /// One component's glob.
    Glob(Vec<u8>),
}

impl CgroupPattern {
    /// Compiles `text`: absolute, no `..` component, no empty class.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        if !text.starts_with('/') {
            return Err(format!(
                "pattern {text:?} must be absolute (start with '/', like /system.slice/*.service)"
            ));
        }
        let mut parts = Vec::new();
        for component in text.split('/').filter(|c| !c.is_empty()) {
            if component == ".." || component == "." {
                return Err(format!("pattern {text:?} must not contain '.' or '..'"));
            }
            if component == "**" {
                if parts.last() != Some(&Part::AnyDepth) {
                    parts.push(Part::AnyDepth);
                }
                continue;
            }
            if component.contains("**") {
                return Err(format!(
                    "pattern {text:?}: '**' must be a whole path component"
                ));
            }
            check_classes(component.as_bytes())
                .map_err(|reason| format!("pattern {text:?}: {reason}"))?;
            parts.push(Part::Glob(component.as_bytes().to_vec()));
        }
        Ok(Self {
            text: text.to_owned(),
            parts,
        })
    }

    /// Compiles every pattern; the first invalid one is the error.
    pub(crate) fn parse_all(texts: &[String]) -> Result<Vec<Self>, String> {
        texts.iter().map(|text| Self::parse(text)).collect()
    }

    /// The pattern as given.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// True when the cgroup at `path` (`/a/b`; `/` is the root) matches.
    pub(crate) fn matches(&self, path: &str) -> bool {
        let components: Vec<&[u8]> = components(path).collect();
        match_parts(&components, &self.parts)
    }

    /// True when a cgroup below `path` (strictly deeper) could match: the walk descends into
    /// `path` only then.
    pub(crate) fn may_match_below(&self, path: &str) -> bool {
        let components: Vec<&[u8]> = components(path).collect();
        prefix_parts(&components, &self.parts)
    }
}

fn components(path: &str) -> impl Iterator<Item = &[u8]> {
    path.split('/').filter(|c| !c.is_empty()).map(str::as_bytes)
}

fn match_parts(path: &[&[u8]], parts: &[Part]) -> bool {
    match parts.split_first() {
        None => path.is_empty(),
        Some((Part::AnyDepth, rest)) => {
            (0..=path.len()).any(|skip| match_parts(&path[skip..], rest))
        }
        Some((Part::Glob(glob), rest)) => match path.split_first() {
            Some((first, tail)) => glob_match(glob, first) && match_parts(tail, rest),
            None => false,
        },
    }
}

/// True when some path strictly below `path` can match `parts`.
fn prefix_parts(path: &[&[u8]], parts: &[Part]) -> bool {
    match parts.split_first() {
        None => false,
        Some((Part::AnyDepth, _)) => true,
        Some((Part::Glob(glob), rest)) => match path.split_first() {
            // Components remain in the pattern: a child can match them.
            None => true,
            Some((first, tail)) => glob_match(glob, first) && prefix_parts(tail, rest),
        },
    }
}

/// Checks that every `[` opens a class that closes.
fn check_classes(glob: &[u8]) -> Result<(), String> {
    let mut at = 0;
    while at < glob.len() {
        if glob[at] == b'[' {
            match class_end(glob, at) {
                Some(end) => at = end,
                None => return Err("a '[' class is not closed by ']'".into()),
            }
        } else {
            at += 1;
        }
    }
    Ok(())
}

/// The index after the `]` closing the class opened at `open`.
fn class_end(glob: &[u8], open: usize) -> Option<usize> {
    let mut at = open + 1;
    if glob.get(at) == Some(&b'!') {
        at += 1;
    }
    // A `]` first in the class is a member.
    if glob.get(at) == Some(&b']') {
        at += 1;
    }
    while at < glob.len() {
        if glob[at] == b']' {
            return Some(at + 1);
        }
        at += 1;
    }
    None
}

/// Whether byte `c` is in `class`, the text between `[` and `]`.
fn class_contains(class: &[u8], c: u8) -> bool {
    let (negated, body) = match class.strip_prefix(b"!") {
        Some(body) => (true, body),
        None => (false, class),
    };
    let mut found = false;
    let mut at = 0;
    while at < body.len() {
        if at + 2 < body.len() && body[at + 1] == b'-' {
            if (body[at]..=body[at + 2]).contains(&c) {
                found = true;
            }
            at += 3;
        } else {
            if body[at] == c {
                found = true;
            }
            at += 1;
        }
    }
    found != negated
}

/// One component against one glob, with backtracking for `*` (linear in practice).
fn glob_match(glob: &[u8], name: &[u8]) -> bool {
    let (mut g, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        let step = match glob.get(g) {
            Some(b'*') => {
                star = Some((g + 1, n));
                g += 1;
                continue;
            }
            Some(b'?') => Some(g + 1),
            Some(b'[') => {
                class_end(glob, g).filter(|&end| class_contains(&glob[g + 1..end - 1], name[n]))
            }
            Some(&literal) => (literal == name[n]).then_some(g + 1),
            None => None,
        };
        match step {
            Some(next) => {
                g = next;
                n += 1;
            }
            None => match star {
                Some((after, from)) => {
                    g = after;
                    n = from + 1;
                    star = Some((after, from + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> CgroupPattern {
        CgroupPattern::parse(text).unwrap()
    }

    #[test]
    fn globs_match_within_one_component() {
        let services = p("/system.slice/*.service");
        assert!(services.matches("/system.slice/nginx.service"));
        assert!(!services.matches("/system.slice/nginx.scope"));
        assert!(!services.matches("/system.slice/a/b.service"));
        assert!(!services.matches("/system.slice"));
        assert!(services.may_match_below("/system.slice"));
        assert!(services.may_match_below("/"));
        assert!(!services.may_match_below("/system.slice/nginx.service"));
        assert!(!services.may_match_below("/user.slice"));
        assert!(p("/m?chine.slice/[a-l]*").matches("/machine.slice/libpod-1"));
        assert!(!p("/machine.slice/[!l]*").matches("/machine.slice/libpod-1"));
        assert!(p("/a*b*c").matches("/aXXbYYbc"));
        assert!(!p("/a*b*c").matches("/aXXbYYb"));
    }

    #[test]
    fn double_star_matches_any_depth_including_none() {
        let kube = p("/kubepods.slice/**");
        assert!(kube.matches("/kubepods.slice"));
        assert!(kube.matches("/kubepods.slice/a"));
        assert!(kube.matches("/kubepods.slice/a/b/c"));
        assert!(!kube.matches("/system.slice"));
        assert!(kube.may_match_below("/kubepods.slice/a/b"));
        let scopes = p("/**/*.scope");
        assert!(scopes.matches("/a.scope"));
        assert!(scopes.matches("/x/y/a.scope"));
        assert!(!scopes.matches("/x/y"));
        assert!(p("/**").matches("/"));
        assert!(p("/").matches("/"));
        assert!(!p("/").matches("/a"));
    }

    #[test]
    fn invalid_patterns_are_refused_with_the_reason() {
        for (bad, why) in [
            ("system.slice/*", "absolute"),
            ("/a/../b", "'..'"),
            ("/a**", "whole path component"),
            ("/a[b", "not closed"),
        ] {
            let error = CgroupPattern::parse(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
    }
}

//! Why values are missing, rebuilt on every pass. Most reasons repeat from one pass to the
//! next ("no GPU library", "not an exclusive cgroup"): a repeated reason reuses the previous
//! pass's shared string, so steady state formats into a scratch buffer and allocates nothing.

use std::borrow::Cow;
use std::fmt::{self, Write};
use std::sync::Arc;

use crate::snapshot::Unavailable;

#[derive(Debug, Default)]
pub(crate) struct Reasons {
    list: Vec<Unavailable>,
    len: usize,
    scratch: String,
}

impl Reasons {
    /// Starts a pass: previous reasons are kept only as candidates for reuse.
    pub(crate) fn begin(&mut self) {
        self.len = 0;
    }

    /// Records why `field` is missing.
    pub(crate) fn add(&mut self, field: &'static str, reason: fmt::Arguments<'_>) {
        self.scratch.clear();
        // Writing into a String cannot fail.
        let _ = self.scratch.write_fmt(reason);
        match self.list.get_mut(self.len) {
            Some(slot) => {
                if slot.field != field {
                    slot.field = Cow::Borrowed(field);
                }
                if *slot.reason != *self.scratch {
                    slot.reason = Arc::from(self.scratch.as_str());
                }
            }
            None => self.list.push(Unavailable {
                field: Cow::Borrowed(field),
                reason: Arc::from(self.scratch.as_str()),
            }),
        }
        self.len += 1;
    }

    /// Records reasons an earlier pass found for values this pass reuses.
    pub(crate) fn repeat(&mut self, earlier: &[Unavailable]) {
        for reason in earlier {
            match self.list.get_mut(self.len) {
                Some(slot) => slot.clone_from(reason),
                None => self.list.push(reason.clone()),
            }
            self.len += 1;
        }
    }

    /// The reasons of this pass.
    pub(crate) fn as_slice(&self) -> &[Unavailable] {
        &self.list[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_reason_shares_the_previous_string() {
        let mut reasons = Reasons::default();
        reasons.begin();
        reasons.add("gpu", format_args!("no library at {}", "/x"));
        let first = Arc::clone(&reasons.as_slice()[0].reason);
        reasons.begin();
        reasons.add("gpu", format_args!("no library at {}", "/x"));
        assert!(Arc::ptr_eq(&first, &reasons.as_slice()[0].reason));
        reasons.begin();
        reasons.add("gpu", format_args!("no library at {}", "/y"));
        assert_eq!(&*reasons.as_slice()[0].reason, "no library at /y");
        reasons.begin();
        assert!(reasons.as_slice().is_empty());
    }
}

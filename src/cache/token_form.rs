//! The form of continue token the upstream issues for a resource
//! ([`KeyForm`]: kube-apiserver's watch cache roots the start key, its etcd3 store does
//! not), so that the pages the cache serves carry the tokens the upstream would have
//! written. Both forms resume anywhere; only the bytes differ.
//!
//! It is learned from tokens the upstream itself issued, at no extra cost: the
//! reflector's paged lists and the consistent-read probes (`cache::fresh`, a `limit=1`
//! list with no resourceVersion, whose answer carries a token once the resource has two
//! objects, i.e. exactly a client's first page). Until one is seen, kube-apiserver 1.36's
//! form ([`KeyForm::Rooted`]). The last token seen wins: an upstream upgraded (or rolled
//! back) under the gateway is followed.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::codec::continue_token::KeyForm;

const UNKNOWN: u8 = 0;
const ROOTED: u8 = 1;
const RELATIVE: u8 = 2;

/// The learned form of one resource's tokens.
#[derive(Debug, Default)]
pub struct TokenForm {
    learned: AtomicU8,
}

impl TokenForm {
    /// Notes the form of a token the upstream issued (tokens that tell nothing, such as
    /// etcd3's `rv:-1` after a compaction, are ignored).
    pub fn learn(&self, token: &str) {
        let Some(form) = KeyForm::of(token) else {
            return;
        };
        let code = match form {
            KeyForm::Rooted => ROOTED,
            KeyForm::Relative => RELATIVE,
        };
        let was = self.learned.swap(code, Ordering::Relaxed);
        if was != code {
            tracing::debug!(form = ?form, "the upstream's continue tokens take this form");
        }
    }

    /// The form to mint tokens in: the upstream's last, or 1.36's.
    pub fn get(&self) -> KeyForm {
        match self.learned.load(Ordering::Relaxed) {
            RELATIVE => KeyForm::Relative,
            _ => KeyForm::Rooted,
        }
    }

    /// Whether a token of the upstream's has been seen.
    pub fn is_learned(&self) -> bool {
        self.learned.load(Ordering::Relaxed) != UNKNOWN
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::continue_token::ContinueToken;

    fn token(form: KeyForm, rv: i64) -> String {
        ContinueToken {
            rv,
            start_after: "ns/a".into(),
        }
        .encode("ns/", form)
    }

    #[test]
    fn defaults_to_1_36_then_follows_the_upstream() {
        let f = TokenForm::default();
        assert!(!f.is_learned());
        assert_eq!(f.get(), KeyForm::Rooted);
        f.learn(&token(KeyForm::Relative, 5));
        assert!(f.is_learned());
        assert_eq!(f.get(), KeyForm::Relative);
        // etcd3's compaction token tells nothing about the pages.
        f.learn(&token(KeyForm::Rooted, -1));
        assert_eq!(f.get(), KeyForm::Relative);
        f.learn("not a token");
        assert_eq!(f.get(), KeyForm::Relative);
        f.learn(&token(KeyForm::Rooted, 9));
        assert_eq!(f.get(), KeyForm::Rooted);
    }
}

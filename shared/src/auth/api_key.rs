//! API keys look like `rk_live_<12 char id>_<32 char secret>`. The part up to the
//! id is the key's prefix: stored, shown in lists and used to find the row. Only
//! the SHA-256 of the whole key is stored; the presented key's hash is compared
//! with it in constant time. Keys are 190+ bits of randomness, so a fast hash is
//! appropriate (an adaptive hash would only slow every request).
use rand::distributions::Alphanumeric;
use rand::Rng;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const KEY_PREFIX: &str = "rk_live_";
const ID_LEN: usize = 12;
const SECRET_LEN: usize = 32;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Manage endpoints, keys and users; read and replay everything.
    Admin,
    /// Post events.
    Ingest,
}

impl Scope {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Ingest => "ingest",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "admin" => Some(Self::Admin),
            "ingest" => Some(Self::Ingest),
            _ => None,
        }
    }
}

/// A full API key. Exists only when created (to be shown once) or when presented.
pub struct ApiKeySecret(String);

impl ApiKeySecret {
    pub fn generate() -> Self {
        let mut rng = rand::rngs::OsRng;
        let mut random =
            |len: usize| -> String { (&mut rng).sample_iter(&Alphanumeric).take(len).map(char::from).collect() };
        Self(format!("{KEY_PREFIX}{}_{}", random(ID_LEN), random(SECRET_LEN)))
    }

    /// Accepts a presented key if it has the right shape; says nothing about validity.
    pub fn from_presented(text: &str) -> Option<Self> {
        let rest = text.strip_prefix(KEY_PREFIX)?;
        let (id, secret) = rest.split_once('_')?;
        let shaped = id.len() == ID_LEN
            && secret.len() == SECRET_LEN
            && id.bytes().chain(secret.bytes()).all(|b| b.is_ascii_alphanumeric());
        shaped.then(|| Self(text.to_owned()))
    }

    /// The stored, displayable identifier (`rk_live_<id>`).
    pub fn prefix(&self) -> &str {
        &self.0[..KEY_PREFIX.len() + ID_LEN]
    }

    pub fn hash(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }

    /// Constant-time comparison with a stored hash.
    pub fn matches(&self, stored_hash: &[u8]) -> bool {
        self.hash().ct_eq(stored_hash).into()
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeySecret({}…)", self.prefix())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_key_is_recognised_and_matches_its_hash() {
        let key = ApiKeySecret::generate();
        let presented = ApiKeySecret::from_presented(key.expose()).unwrap();
        assert_eq!(presented.prefix(), key.prefix());
        assert!(presented.matches(&key.hash()));
        assert!(!ApiKeySecret::generate().matches(&key.hash()));
        assert!(ApiKeySecret::from_presented("rk_live_short_x").is_none());
        assert!(ApiKeySecret::from_presented("Bearer nonsense").is_none());
        assert!(!format!("{key:?}").contains(&key.expose()[21..]));
    }
}

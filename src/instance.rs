//! This process's instance nonce: a random value drawn once per start and served at
//! `routes::INSTANCE`, so `gatehouse doctor` can tell whether `server.public_url` reaches this very
//! process or another one. It is no secret: it only tells one start from another.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceNonce(String);

impl InstanceNonce {
    /// A new random nonce (128 bits, hex).
    pub fn random() -> Self {
        Self(format!("{:032x}", rand::random::<u128>()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_start_draws_another_nonce() {
        let first = InstanceNonce::random();
        assert_eq!(first.as_str().len(), 32);
        assert_ne!(first, InstanceNonce::random());
    }
}

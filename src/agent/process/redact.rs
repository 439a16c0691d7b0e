pub const REDACTED: &[u8] = b"[REDACTED]";
pub struct Redactor;

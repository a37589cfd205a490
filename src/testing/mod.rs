//! Fake vendor and fault injection (stub).

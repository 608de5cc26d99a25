//! C APIs.

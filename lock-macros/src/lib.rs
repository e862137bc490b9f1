//! `#[distributed_lock("name {arg}")]`: run an async fn under a distributed lock.
//!
//! This crate is the thin proc-macro shim; the expansion lives in ordinary modules with
//! unit tests, and the runtime half (`__private::run`) in the `distlock` facade, which
//! re-exports the attribute under its default feature `macros`. See the facade's
//! documentation of `distributed_lock` for the options and the guarantees.

// Every public item of a library crate says what it is.
#![warn(missing_docs)]

mod args;
mod expand;
mod template;

use proc_macro::TokenStream;

/// Runs the annotated async fn under a distributed lock; see the `distlock` crate.
#[proc_macro_attribute]
pub fn distributed_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(attr.into(), item.into()).into()
}

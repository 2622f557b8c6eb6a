//! The local runner's library: how the roles are assembled in one process.
//! The binary (`main.rs`) only parses the command line.
pub mod demo;
pub mod openapi;
pub mod ops;
pub mod roles;
pub mod settings;
pub mod stopping;

pub use roles::{api_router, migrate, run, Roles};

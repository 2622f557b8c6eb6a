//! The delivery worker: a long-lived RabbitMQ consumer (manual acks, bounded
//! prefetch). For each message it claims the delivery row, sends the signed
//! HTTP request, records the attempt and the next state in one transaction, and
//! only then acks.
//!
//! - [`consumer`]: the AMQP side (connect, consume, ack/nack, reconnect).
//! - [`process`]: one message from envelope to settled row.
//! - [`sender`]: the outbound HTTP client and request signing.
//! - [`sqs`]: endpoints whose destination is an Amazon SQS queue.
//! - [`aws_role`]: AWS destinations' roles in their owners' accounts, assumed.
//! - [`aws_identity`]: the worker's own AWS credentials (keys, or a container's).
//! - [`verdict`]: what an HTTP result means (delivered / retry / permanent).
//! - [`report`]: the log line and metrics of each attempt.
//! - [`hold`]: keeping a message through a database outage instead of requeueing it.
//! - [`saturation`]: endpoints flow control just turned away (skip their claims).
//! - [`admission`]: deliveries parked for a full endpoint, taken from Postgres
//!   into its slots as they free.
//! - [`health`]: the endpoint's health after an attempt, and automatic disabling.
//! - [`circuit`]: the endpoint's circuit after an attempt (a run of failures
//!   opens it, and its deliveries park in Postgres until a probe succeeds).
//! - [`lane`]: ordering lanes — a lane's head settles in a transaction that
//!   moves the lane on; its send never outlives the lease.
//!
//! Invariant: the worker never creates deliveries or outbox rows for the
//! tenant's events; it only settles the deliveries it was handed. The one
//! exception is an operational event (`endpoint.disabled`, `delivery.dead`),
//! stored through `repo::operational::emit` in the transaction of the change
//! it reports; and the outbox row that releases the next delivery of an
//! ordering lane, in the transaction that makes the lane's head terminal.
pub mod admission;
pub mod aws_identity;
pub mod aws_role;
pub mod circuit;
pub mod consumer;
pub mod delay;
pub mod gate;
pub mod health;
pub mod hold;
pub mod lane;
pub mod policy;
pub mod process;
pub mod report;
pub mod resolver;
pub mod saturation;
pub mod sender;
mod settle;
pub mod slots;
pub mod sqs;
pub mod verdict;
pub mod weights;

pub use consumer::Worker;

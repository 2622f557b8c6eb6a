//! Integration tests against real Postgres, RabbitMQ and a real HTTP receiver.
//! One test binary (fast to link); one module per area.
mod alerting;
mod auth;
mod backpressure;
mod batching;
mod crashes;
mod endpoints;
mod exclusive;
mod faults;
mod flow;
mod https;
mod identity;
mod ingest;
mod lambda;
mod managed;
mod openapi;
mod operations;
mod outages;
mod pipeline;
mod publishing;
mod queries;
mod replay;
mod retries;
mod sam_local;
mod sqs_wakeup;
mod ssrf;

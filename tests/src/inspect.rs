//! Reaching around RelayOps in tests: cutting this test's database, planting
//! triggers in it, and looking at its RabbitMQ namespace directly.
use serde_json::Value;

use crate::TestEnv;

/// Outages of this test's own database (other tests are unaffected).
impl TestEnv {
    async fn admin(&self) -> tokio_postgres::Client {
        let target = relayops_shared::db::PgTarget::parse(&self.admin_url).expect("admin URL");
        let (client, connection) = target.connect().await.expect("admin connection");
        tokio::spawn(connection);
        client
    }

    /// Refuses new connections to the test database and cuts the open ones:
    /// to every RelayOps component, Postgres is down.
    pub async fn cut_database(&self) {
        let admin = self.admin().await;
        let name = &self.database_name;
        admin.batch_execute(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false")).await.expect("block");
        admin
            // Client sessions only: an autovacuum worker on the database is a
            // superuser process the admin role may not terminate.
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
                &[name],
            )
            .await
            .expect("terminate");
    }

    pub async fn restore_database(&self) {
        let admin = self.admin().await;
        admin
            .batch_execute(&format!("ALTER DATABASE {} ALLOW_CONNECTIONS true", self.database_name))
            .await
            .expect("unblock");
    }
}

/// Faults and probes planted in the test's database.
impl TestEnv {
    /// Creates the PL/pgSQL trigger function `relayops.<name>` with `body`
    /// (between `BEGIN` and `END`; it must `RETURN NEW` to let the row
    /// through) and fires it `when` (e.g. `BEFORE INSERT ON relayops.events`)
    /// for each row.
    pub async fn create_trigger(&self, name: &str, when: &str, body: &str) {
        self.plant_trigger(name, when, "ROW", body).await;
    }

    /// As [`create_trigger`](Self::create_trigger), fired once per statement
    /// (`when` may add `REFERENCING NEW TABLE AS …`); `body` must `RETURN NULL`.
    pub async fn create_statement_trigger(&self, name: &str, when: &str, body: &str) {
        self.plant_trigger(name, when, "STATEMENT", body).await;
    }

    /// Notes every outbox claim a publisher makes (a row in
    /// `relayops.claims_seen` per claim statement, whether or not it found
    /// rows: the claim is an UPDATE, and statement triggers fire on none).
    pub async fn note_outbox_claims(&self) {
        let client = self.pool.get().await.expect("connection");
        client.batch_execute("CREATE TABLE relayops.claims_seen (at timestamptz)").await.expect("table created");
        self.create_statement_trigger(
            "note_claims",
            "AFTER UPDATE ON relayops.outbox_messages",
            "IF current_query() LIKE '%publish_attempts = o.publish_attempts + 1%' THEN
                 INSERT INTO relayops.claims_seen VALUES (now());
             END IF;
             RETURN NULL;",
        )
        .await;
    }

    async fn plant_trigger(&self, name: &str, when: &str, level: &str, body: &str) {
        let client = self.pool.get().await.expect("connection");
        let sql = format!(
            "CREATE FUNCTION relayops.{name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} END $$;
             CREATE TRIGGER {name} {when} FOR EACH {level} EXECUTE FUNCTION relayops.{name}();"
        );
        client.batch_execute(&sql).await.expect("trigger created");
    }
}

/// Looking at the test's RabbitMQ namespace directly.
impl TestEnv {
    pub fn topology(&self) -> relayops_shared::broker::Topology {
        relayops_shared::broker::Topology::new(&self.broker)
    }

    async fn channel(&self) -> (std::sync::Arc<lapin::Connection>, lapin::Channel) {
        let connection = relayops_shared::broker::connect(&self.broker, "test-inspector").await.expect("broker");
        let channel = connection.create_channel().await.expect("channel");
        (connection, channel)
    }

    /// Messages ready in a queue (passive declare: the queue must exist).
    pub async fn queue_depth(&self, queue: &str) -> u32 {
        let (_connection, channel) = self.channel().await;
        relayops_shared::broker::queue_depth(&channel, queue).await.expect("queue exists")
    }

    /// Messages ready in every ready queue together (`<ns>.ready` and each
    /// ready shard): where a first attempt waits, whichever shard took it.
    pub async fn ready_depth(&self) -> u32 {
        let (_connection, channel) = self.channel().await;
        let mut depth = 0;
        for shard in self.topology().ready_shards.all() {
            depth += relayops_shared::broker::queue_depth(&channel, &shard.queue).await.expect("queue exists");
        }
        depth
    }

    /// Deletes a queue: what the broker is then sent for it comes back
    /// unroutable (a refused publish) until the topology is declared again.
    pub async fn delete_queue(&self, queue: &str) {
        let (_connection, channel) = self.channel().await;
        channel.queue_delete(queue, Default::default()).await.expect("queue.delete");
    }

    /// Declares the installation's exchanges and queues (as every role does
    /// when it connects): a deleted queue is back.
    pub async fn declare_topology(&self) {
        let (_connection, channel) = self.channel().await;
        self.topology().declare(&channel).await.expect("topology declared");
    }

    /// Empties a queue, as a broker that lost its messages would.
    pub async fn purge_queue(&self, queue: &str) -> u32 {
        let (_connection, channel) = self.channel().await;
        channel.queue_purge(queue, Default::default()).await.expect("queue.purge")
    }

    /// Messages waiting in any retry queue.
    pub async fn retry_queue_depth(&self) -> u32 {
        let mut total = 0;
        for bucket in self.topology().retry_buckets {
            total += self.queue_depth(&bucket.queue).await;
        }
        total
    }

    /// Takes (gets and acks) every message on the operations dead-letter queue.
    pub async fn take_dead_letters(&self) -> Vec<Value> {
        self.take_messages(&self.topology().dead_queue).await
    }

    /// Takes (gets and acks) every message on `queue`, each as JSON.
    pub async fn take_messages(&self, queue: &str) -> Vec<Value> {
        let (_connection, channel) = self.channel().await;
        let mut messages = Vec::new();
        while let Some(message) =
            channel.basic_get(queue, lapin::options::BasicGetOptions::default()).await.expect("basic.get")
        {
            messages.push(serde_json::from_slice(&message.delivery.data).unwrap_or(Value::Null));
            message.delivery.acker.ack(Default::default()).await.expect("ack");
        }
        messages
    }

    /// Publishes `message` straight to `queue` (the default exchange),
    /// persistent and confirmed, as a message coming back to it would be.
    pub async fn publish_to_queue(&self, queue: &str, message: &Value) {
        let (_connection, channel) = self.channel().await;
        channel.confirm_select(Default::default()).await.expect("confirm.select");
        let body = serde_json::to_vec(message).expect("json");
        let properties = lapin::BasicProperties::default().with_delivery_mode(2);
        let confirm =
            channel.basic_publish("", queue, Default::default(), &body, properties).await.expect("basic.publish");
        assert!(confirm.await.expect("confirm").is_ack(), "the broker took it");
    }

    /// [`take_messages`](Self::take_messages) from every ready queue.
    pub async fn take_ready_messages(&self) -> Vec<Value> {
        let mut messages = Vec::new();
        for shard in self.topology().ready_shards.all() {
            messages.extend(self.take_messages(&shard.queue).await);
        }
        messages
    }
}

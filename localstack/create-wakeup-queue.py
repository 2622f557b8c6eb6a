#!/usr/bin/env python3
"""Creates the publisher's wake-up queue and its dead-letter queue on whatever
SQS endpoint is configured: LocalStack (run as one of its ready.d init hooks,
or by hand) or moto server. Idempotent; prints the queue URL.

Endpoint: AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL (default
http://localhost:4566, LocalStack's port). Names: RELAYOPS_WAKEUP_QUEUE_NAME
(default relayops-publisher-wakeup) and the same with `-dlq`. The settings
match template.yaml.
"""
import json
import os

import boto3

endpoint = os.environ.get("AWS_ENDPOINT_URL_SQS") or os.environ.get("AWS_ENDPOINT_URL") or "http://localhost:4566"
name = os.environ.get("RELAYOPS_WAKEUP_QUEUE_NAME", "relayops-publisher-wakeup")
sqs = boto3.client(
    "sqs",
    endpoint_url=endpoint,
    region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
    aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "test"),
    aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
)

dlq_url = sqs.create_queue(QueueName=f"{name}-dlq", Attributes={"MessageRetentionPeriod": "86400"})["QueueUrl"]
dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
queue_url = sqs.create_queue(
    QueueName=name,
    Attributes={
        "MessageRetentionPeriod": "300",
        "VisibilityTimeout": "360",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"}),
    },
)["QueueUrl"]
print(queue_url)

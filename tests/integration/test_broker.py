"""The local broker and the declared topic set, against a real Kafka."""

from __future__ import annotations

import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from deploy.kafka_admin import cluster_broker_ids
from deploy.topics import create_topics, describe_topics
from schemas.topics import TOPICS, TopicNames


async def test_metadata_lists_one_broker(kafka_bootstrap: str) -> None:
    assert len(await cluster_broker_ids(kafka_bootstrap)) == 1


async def test_create_topics_is_idempotent(kafka_bootstrap: str) -> None:
    prefix = f"idem-{uuid.uuid4().hex[:8]}."
    names = TopicNames(prefix)

    created = await create_topics(kafka_bootstrap, partitions=3, prefix=prefix)
    again = await create_topics(kafka_bootstrap, partitions=3, prefix=prefix)

    assert sorted(created) == sorted(names.all())
    assert again == []
    assert await describe_topics(kafka_bootstrap, prefix=prefix) == dict.fromkeys(names.all(), 3)


async def test_compacted_topics_really_compact(
    kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    resources = [
        ConfigResource(
            ConfigResourceType.TOPIC, topic_names.name(s.logical), {"cleanup.policy": None}
        )
        for s in TOPICS
    ]
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        responses = await admin.describe_configs(resources)
    finally:
        await admin.close()
    policy = {
        res["resource_name"]: {e["config_names"]: e["config_value"] for e in res["config_entries"]}
        for resp in responses
        for res in resp.to_object()["resources"]
    }
    for spec in TOPICS:
        expected = "compact" if spec.compacted else "delete"
        assert policy[topic_names.name(spec.logical)]["cleanup.policy"] == expected, spec.logical
    assert policy[topic_names.nodes_quarantine]["cleanup.policy"] == "compact"
    assert policy[topic_names.jobs_status]["cleanup.policy"] == "compact"


async def test_fixture_topics_exist_with_test_partitions(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int
) -> None:
    present = await describe_topics(kafka_bootstrap, prefix=topic_names.prefix)
    assert present == dict.fromkeys(topic_names.all(), topic_partitions)


async def test_message_round_trip(kafka_bootstrap: str, topic_names: TopicNames) -> None:
    topic = topic_names.gpu_xid
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, b'{"xid": 79}', key=b"node-a")
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=kafka_bootstrap,
        group_id=f"rt-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        record = await consumer.getone()
    finally:
        await consumer.stop()
    assert (record.partition, record.offset) == (meta.partition, meta.offset)
    assert record.key == b"node-a"
    assert record.value == b'{"xid": 79}'

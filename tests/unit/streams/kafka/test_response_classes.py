"""kafka-python's response class table stays usable when two threads make the same API
version's class at once (streams/kafka/response_classes.py): checked on kafka-python's own
parser, and with real threads racing in a fresh process."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

from airflow_stateful_provider.streams.kafka.response_classes import install_response_classes_kept


def init_producer_id_answer(version: int) -> list:
    """What kafka-python's parser makes of a broker's answer to an InitProducerId request."""
    protocol = KafkaProtocol(client_id="test")
    correlation_id = protocol.send_request(InitProducerIdRequest(
        version=version, transactional_id="tx", transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1))
    answer = InitProducerIdResponse(version=version, throttle_time_ms=0, error_code=0, producer_id=7, producer_epoch=3)
    answer.with_header(correlation_id=correlation_id)
    return protocol.receive_bytes(answer.encode(framed=True, header=True))


def test_an_answer_decodes_after_a_version_class_made_by_a_losing_thread_is_freed():
    install_response_classes_kept()
    version = InitProducerIdResponse.max_version
    kept = InitProducerIdResponse[version]
    # What a race of two threads leaves: each made the version's class, one of them was kept.
    del InitProducerIdResponse._VERSIONS[version]
    lost = InitProducerIdResponse[version]
    InitProducerIdResponse._VERSIONS[version] = kept
    assert lost is not kept
    del lost
    gc.collect()

    [(correlation_id, response)] = init_producer_id_answer(version)
    assert type(response) is InitProducerIdResponse  # the primary class, exactly
    assert (correlation_id, response.producer_id, response.producer_epoch) == (1, 7, 3)


RACE = textwrap.dedent("""
    import gc, sys, threading
    sys.setswitchinterval(1e-6)  # threads switch between nearly every bytecode
    if sys.argv[1] == "kept":
        from airflow_stateful_provider.streams.kafka.response_classes import install_response_classes_kept
        install_response_classes_kept()
    from kafka.protocol.api_header import ResponseClassRegistry
    from kafka.protocol.producer import transaction

    responses = [value for name, value in vars(transaction).items() if name.endswith("Response")]
    dead = 0
    for response in responses:
        for version in range(response.max_version + 1):
            start = threading.Barrier(4)
            def make():
                start.wait()
                response[version]
            threads = [threading.Thread(target=make) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            gc.collect()
            try:
                ResponseClassRegistry._response_class_registry[response.API_KEY][version]
            except ReferenceError:
                dead += 1
    print(dead, sum(response.max_version + 1 for response in responses))
""")


def race(mode: str) -> tuple[int, int]:
    """(dead table entries, versions raced) after four threads made each version of each
    transaction API's answer class at once, in a fresh process."""
    result = subprocess.run([sys.executable, "-c", RACE, mode], capture_output=True, text=True, timeout=120,
                            check=True)
    dead, raced = map(int, result.stdout.split())
    return dead, raced


def test_threads_making_every_version_at_once_leave_no_dead_entry():
    dead, raced = race("kept")
    assert raced > 20
    assert dead == 0


def test_installed_late_it_sets_replaced_entries_back_to_the_primary_class():
    script = textwrap.dedent("""
        from kafka.protocol.api_header import ResponseClassRegistry
        from kafka.protocol.producer.transaction import InitProducerIdResponse
        from airflow_stateful_provider.streams.kafka.response_classes import install_response_classes_kept

        table = ResponseClassRegistry._response_class_registry
        InitProducerIdResponse[1]
        before = table[22].__name__
        install_response_classes_kept()
        InitProducerIdResponse[2]
        after = table[22].__name__
        replaced = [key for key, entry in table.items() if entry._class_version is not None]
        print(before, after, len(replaced), table[22][2] is InitProducerIdResponse[2])
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split() == ["InitProducerIdResponse_v1", "InitProducerIdResponse", "0", "True"]


def test_an_entry_dead_before_the_install_is_reported_not_raised():
    script = textwrap.dedent("""
        import gc, logging
        from kafka.protocol.api_header import ResponseClassRegistry
        from kafka.protocol.producer.transaction import InitProducerIdResponse
        from airflow_stateful_provider.streams.kafka.response_classes import install_response_classes_kept

        logging.basicConfig(format="%(levelname)s %(message)s")
        kept = InitProducerIdResponse[3]
        del InitProducerIdResponse._VERSIONS[3]
        InitProducerIdResponse[3]  # a losing thread's class, now in the table
        InitProducerIdResponse._VERSIONS[3] = kept
        gc.collect()
        install_response_classes_kept()
        print("installed")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split() == ["installed"]
    assert "ERROR kafka-python's response class for API key 22 was freed" in result.stderr


def test_a_client_made_with_the_users_own_network_client_factory_keeps_the_table_too(tmp_path):
    script = textwrap.dedent("""
        import sys
        from kafka import KafkaAdminClient
        from kafka.protocol.api_header import ResponseClassRegistry
        from kafka.protocol.producer.transaction import InitProducerIdResponse
        from airflow_stateful_provider.streams.kafka import response_classes
        from airflow_stateful_provider.streams.kafka.clients import construct_client

        def users_factory(*args, **kwargs):
            raise RuntimeError("the user's factory ran")

        if sys.argv[1] == "construct_client":
            make_admin = lambda: construct_client(KafkaAdminClient, {"bootstrap_servers": "127.0.0.1:9",
                                                                    "kafka_client": users_factory})
        else:  # an instance's own clients
            from airflow_stateful_provider.streams import KafkaStreams, StreamsBuilder, StreamsConfig

            builder = StreamsBuilder()
            builder.stream("in").to("out")
            config = StreamsConfig("app", "127.0.0.1:9", state_dir=sys.argv[2],
                                   client_configs={"kafka_client": users_factory})
            make_admin = KafkaStreams(builder.build(), config)._new_admin
        try:
            make_admin()
        except RuntimeError as exc:
            print(exc)
        InitProducerIdResponse[1]
        print(ResponseClassRegistry._response_class_registry[22].__name__)
    """)
    for way in ("construct_client", "KafkaStreams"):
        result = subprocess.run([sys.executable, "-c", script, way, str(tmp_path)], capture_output=True, text=True,
                                timeout=120, check=True)
        assert result.stdout.splitlines() == ["the user's factory ran", "InitProducerIdResponse"], (way, result.stderr)

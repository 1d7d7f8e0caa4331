"""On-call: read one key of a running application's store, without stopping it.

Trigger it by hand (``airflow dags trigger oncall_query_store --conf '{"application_id":
"clicks", "store": "currency-rates-store", "key": "EUR"}'``) when someone asks "what does the
state say for this key?". The task asks the running instances over the application's query
topics (docs/interactive-queries.md), so it needs no network path to them: the active
instance of the key's task answers (or a standby, with ``allow_stale``), and the log says
which one, at which input position. ``as_of`` reads a versioned store as of an epoch-ms time.

The task fails, with the reason, when the application or the store is unknown, the key's
task is restoring, or no instance answers within the timeout; the answer goes to XCom.
The same lookup is ``stateful-streams query <application_id> <store> <key>``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task

with DAG(
    dag_id="oncall_query_store",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["stateful-streams", "on-call"],
    params={
        "application_id": Param("clicks-and-payments", type="string", minLength=1),
        "store": Param("currency-rates-store", type="string", minLength=1),
        "key": Param("EUR", type="string", minLength=1),
        "as_of": Param(None, type=["null", "integer"], minimum=0),
        "allow_stale": Param(False, type="boolean"),
    },
    doc_md=__doc__,
) as dag:

    @task
    def read_value(params: dict | None = None) -> dict:
        """Ask the application for ``params.key`` in ``params.store``; log and return the answer."""
        from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook

        answer = StatefulStreamsHook().query_store(params["application_id"], params["store"], params["key"],
                                                   as_of=params["as_of"], allow_stale=params["allow_stale"])
        print(f"{params['store']}[{params['key']!r}] = {answer['value']!r} (found: {answer['found']}) from "
              f"instance {answer['instance_id']}, task {answer['task_id']}, position {answer['position']}")
        return answer

    read_value()

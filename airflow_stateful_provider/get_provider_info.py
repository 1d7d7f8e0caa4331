"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

The connection form is declared here (``conn-fields``, ``ui-field-behaviour``) rather than
by ``get_connection_form_widgets``/``get_ui_field_behaviour`` on the hook: Airflow 3.2+
reads the declarative form without importing the hook and deprecates the hook methods.
Extra fields are stored in the connection's extra under their plain names, which is what
``StatefulStreamsHook`` reads. List a module here only once it exists (a unit test imports
every one).
"""

from __future__ import annotations

from airflow_stateful_provider import __version__

INTEGRATION = "Stateful Streams"


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-stateful-provider",
        "name": "Stateful Streams",
        "description": "Stateful stream pipelines (Kafka Streams semantics, RocksDB state) on Spark.",
        "versions": [__version__],
        "integrations": [
            {"integration-name": INTEGRATION, "tags": ["service"],
             "external-doc-url": "https://kafka.apache.org/documentation/streams/"},
        ],
        "hooks": [
            {"integration-name": INTEGRATION,
             "python-modules": ["airflow_stateful_provider.hooks.snapshot_storage",
                                "airflow_stateful_provider.hooks.stateful_streams"]},
        ],
        "operators": [
            {"integration-name": INTEGRATION,
             "python-modules": ["airflow_stateful_provider.operators.maintenance",
                                "airflow_stateful_provider.operators.reset",
                                "airflow_stateful_provider.operators.restart",
                                "airflow_stateful_provider.operators.snapshots",
                                "airflow_stateful_provider.operators.submit"]},
        ],
        "sensors": [
            {"integration-name": INTEGRATION,
             "python-modules": ["airflow_stateful_provider.sensors.restoration",
                                "airflow_stateful_provider.sensors.standby_lag"]},
        ],
        "triggers": [
            {"integration-name": INTEGRATION,
             "python-modules": ["airflow_stateful_provider.triggers.status"]},
        ],
        # on SubmitTopologyOperator, RestorationSensor and StandbyLagSensor task instances
        "extra-links": [
            "airflow_stateful_provider.links.stateful_streams.StatefulStreamsPageLink",
            "airflow_stateful_provider.links.stateful_streams.SparkUILink",
        ],
        # the plugin's page and scrape endpoint (airflow_stateful_provider/plugins/)
        "config": {
            "stateful_streams": {
                "description": "The Stateful streams page and the metrics scrape endpoint on the API server.",
                "options": {
                    "ui_conn_ids": {
                        "description": "Comma-separated stateful_streams connections whose applications the page "
                                       "and the scrape endpoint show; empty: every connection of that type in the "
                                       "metadata database and in AIRFLOW_CONN_* variables.",
                        "version_added": "0.1.0", "type": "string", "example": "kafka_prod,kafka_staging",
                        "default": "",
                    },
                    "ui_refresh_seconds": {
                        "description": "How often the page refreshes itself, in seconds (at least 1).",
                        "version_added": "0.1.0", "type": "integer", "example": "5", "default": "3",
                    },
                    "ui_max_standby_lag": {
                        "description": "Changelog offsets a standby may lag before the page marks it (when the "
                                       "link of a StandbyLagSensor does not give the sensor's own bound).",
                        "version_added": "0.1.0", "type": "integer", "example": "1000", "default": "10000",
                    },
                    "status_cache_seconds": {
                        "description": "How long a status read is reused by the page's viewers and the scrapes.",
                        "version_added": "0.1.0", "type": "float", "example": "5", "default": "2",
                    },
                    "stale_after_seconds": {
                        "description": "Instances whose last status document is older are stale (not trusted).",
                        "version_added": "0.1.0", "type": "integer", "example": "60", "default": "30",
                    },
                    "metrics_token": {
                        "description": "A bearer token the scrape endpoint accepts besides Airflow's own tokens "
                                       "(Prometheus: authorization credentials); empty: Airflow's tokens only.",
                        "version_added": "0.1.0", "type": "string", "example": None, "default": "",
                        "sensitive": True,
                    },
                },
            },
        },
        "connection-types": [
            {
                "connection-type": "stateful_streams",
                "hook-class-name": "airflow_stateful_provider.hooks.stateful_streams.StatefulStreamsHook",
                "hook-name": "Stateful Streams (Kafka)",
                "conn-fields": {
                    "security_protocol": {
                        "label": "Security protocol",
                        "schema": {"type": ["string", "null"], "default": "PLAINTEXT",
                                   "enum": ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]},
                        "description": "How clients talk to the brokers; SASL_* needs a SASL mechanism",
                    },
                    "sasl_mechanism": {
                        "label": "SASL mechanism",
                        "schema": {"type": ["string", "null"],
                                   "enum": [None, "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI",
                                            "AWS_MSK_IAM"]},
                        "description": "Only with SASL_PLAINTEXT or SASL_SSL. PLAIN and SCRAM: login and password; "
                                       "OAUTHBEARER: a token in password, or a token provider; GSSAPI: the "
                                       "machine's Kerberos ticket; AWS_MSK_IAM (SASL_SSL): the machine's AWS "
                                       "credentials",
                    },
                    "sasl_oauth_token_provider": {
                        "label": "OAuth token provider",
                        "schema": {"type": ["string", "null"]},
                        "description": "OAUTHBEARER without a fixed token: 'package.module:attribute', a kafka-python "
                                       "AbstractTokenProvider class or instance, or a function returning the token; "
                                       "importable where the tasks and the Spark executors run",
                    },
                    "sasl_kerberos_service_name": {
                        "label": "Kerberos service name",
                        "schema": {"type": ["string", "null"]},
                        "description": "GSSAPI only; default 'kafka'",
                    },
                    "sasl_kerberos_domain_name": {
                        "label": "Kerberos domain name",
                        "schema": {"type": ["string", "null"]},
                        "description": "GSSAPI only; default: each broker's host name",
                    },
                    "ssl_cafile": {
                        "label": "SSL CA location",
                        "schema": {"type": ["string", "null"]},
                        "description": "PEM file of the CA that signed the brokers' certificates, on the "
                                       "machines running the tasks and the Spark executors (SSL or SASL_SSL only)",
                    },
                    "ssl_certfile": {
                        "label": "SSL client certificate",
                        "schema": {"type": ["string", "null"]},
                        "description": "Mutual TLS: PEM file of the client certificate (its chain, and the key "
                                       "when no key file is given), on the same machines",
                    },
                    "ssl_keyfile": {
                        "label": "SSL client key",
                        "schema": {"type": ["string", "null"]},
                        "description": "Mutual TLS: PEM file of the client certificate's private key",
                    },
                    "ssl_password": {
                        "label": "SSL key password",
                        "schema": {"type": ["string", "null"], "format": "password"},
                        "description": "Password of an encrypted client key",
                    },
                    "ssl_check_hostname": {
                        "label": "Check the brokers' host names",
                        "schema": {"type": ["boolean", "null"], "default": True},
                        "description": "Whether a broker's certificate must name the host connected to (turn off "
                                       "only for certificates without the brokers' names)",
                    },
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port", "extra"],
                    "relabeling": {"host": "Bootstrap servers", "login": "SASL username",
                                   "password": "SASL password or OAuth token"},
                    "placeholders": {"host": "broker-1:9092,broker-2:9092", "login": "PLAIN and SCRAM only",
                                     "password": "PLAIN and SCRAM, or an OAUTHBEARER token"},
                },
            },
        ],
    }

"""``python -m airflow_stateful_provider.cli``: the same as ``stateful-streams``."""

import sys

from airflow_stateful_provider.cli.main import main

sys.exit(main())

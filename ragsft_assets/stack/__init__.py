"""``ragsft stack``: the deployed topology (PostgreSQL, ``dagster-daemon``, ``dagster-webserver``) on one
machine.

- ``config``: the one table of run-queue, pool, run-monitoring and retry settings that both the Helm
  values (``deploy/helm/values.yaml``, ``deploy/chart/values.yaml``) and the stack's ``dagster.yaml``
  follow, and the generated instance and workspace files;
- ``active``: whether a stack is up under a home (light: ``home.dagster_home`` asks it on every call);
- ``processes``: start, check and stop the three processes.
"""

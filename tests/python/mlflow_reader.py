"""Reads an MLflow file store with MLflow's own client (MlflowClient).

Usage: MLFLOW_ALLOW_FILE_STORE=true mlflow_reader.py STORE EXPERIMENT_NAME

Prints, for every run of the experiment (oldest first):
  run <run id> <status> <run name>
  param <key> <value>
  tag <key> <value>                       (tags not starting with "mlflow." but mlflow.runName)
  metric <key> <step> <value (repr)>      (each metric's whole history, by step)
  artifact <path>
Exits 1 if the client cannot read the store or finds no such experiment.
"""
import os
import sys

from mlflow.tracking import MlflowClient


def main():
    store, name = sys.argv[1], sys.argv[2]
    client = MlflowClient(tracking_uri="file://" + os.path.abspath(store))
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        print(f"no experiment '{name}' in {store}")
        return 1
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    for run in runs:
        print("run", run.info.run_id, run.info.status, run.info.run_name)
        for key, value in sorted(run.data.params.items()):
            print("param", key, value)
        for key, value in sorted(run.data.tags.items()):
            if not key.startswith("mlflow.") or key == "mlflow.runName":
                print("tag", key, value)
        for key in sorted(run.data.metrics):
            for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: (m.step, m.timestamp)):
                print("metric", key, m.step, repr(m.value))
        for artifact in client.list_artifacts(run.info.run_id):
            print("artifact", artifact.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

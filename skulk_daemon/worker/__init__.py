"""The worker: reconcile State with the runners this node actually runs."""

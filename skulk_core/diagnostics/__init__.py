"""Pure diagnostics: the doctor's checks over gathered facts, and the cluster merges."""

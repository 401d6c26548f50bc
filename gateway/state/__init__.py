"""State shared between replicas (Redis): connections and their health."""

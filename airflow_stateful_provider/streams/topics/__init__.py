"""Internal topics: the changelog and repartition topics a topology needs, creating them on
the brokers, and finding configs that drifted from what the topology asks for."""

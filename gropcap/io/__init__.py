"""Output layer: Arrow tables -> Parquet files with provenance metadata."""

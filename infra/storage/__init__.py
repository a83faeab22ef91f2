"""PostgreSQL: the engine, the migrations, the database roles, and the read side's SQL."""

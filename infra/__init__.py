"""Operations around the code: settings, logs, migrations, broker topology, container files."""

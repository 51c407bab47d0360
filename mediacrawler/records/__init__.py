"""The records database: posts, authors, media assets and comments upserted by their platform ids, in SQLite or
PostgreSQL (docs/records.md, "Records database"). ``rows`` turns a record into rows, ``schema`` holds the tables
and their migrations, ``store`` the two backends behind one upsert path, ``read`` the rows back as records."""

"""The trace format and its reader: schema, the incremental builder, in-memory loads."""

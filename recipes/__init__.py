"""The bundled recipes (`recipe=<file stem>`), packaged as `agentforge.recipes`; see `agentforge.schema.compose`."""

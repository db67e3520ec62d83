"""One module per format (reader beside its writer), the deserializer protocol every format and plug-in meets,
file identity, the error ledger and the index cache."""

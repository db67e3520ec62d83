"""The columnar table of every sequence of every deserializer, the join by key, data slices."""

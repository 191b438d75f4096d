"""Dataset readers. Each returns plain records and names the file and line of any malformed row."""

"""Legacy text completions (`POST /v1/completions`), translated to the chat pipeline and back."""

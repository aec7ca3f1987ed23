"""The model runtime's KV memory and the content it must hold."""

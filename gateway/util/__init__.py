"""Small utilities with no gateway knowledge: JSON depth, token estimates, a work offload thread."""

"""Model adapters, capabilities and provider error classification."""

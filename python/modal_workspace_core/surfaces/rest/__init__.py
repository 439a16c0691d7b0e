"""REST for GPT Actions: the app and its middleware, the routes generated from the operation
table (each response fitted under the Actions limits, the way its output declares), and the
OpenAPI schema."""

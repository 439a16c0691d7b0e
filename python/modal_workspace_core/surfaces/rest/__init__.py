"""REST for GPT Actions: the app and its middleware, the routes generated from the operation
table, the OpenAPI schema, and fitting each response under the Actions limits."""

-- What an upstream offers beside tools, as last listed with them: its resources, resource
-- templates and prompts (unprefixed) and the capabilities it declared, as one JSON object.
-- The digest covers the tools and this together.
ALTER TABLE upstream_catalogues
    ADD COLUMN offers TEXT NOT NULL DEFAULT '{}' CHECK (json_type(offers) = 'object');

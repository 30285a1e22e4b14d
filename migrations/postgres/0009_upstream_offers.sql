-- What an upstream offers beside tools, as last listed with them: its resources, resource
-- templates and prompts (unprefixed) and the capabilities it declared, as one JSON object.
-- The digest covers the tools and this together.
ALTER TABLE upstream_catalogues
    ADD COLUMN offers JSONB NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(offers) = 'object');

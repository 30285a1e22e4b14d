-- The issuer a connection's tokens came from and a sign-in flow started with (issue 40): a
-- remote server's tokens and codes go to that issuer only. NULL: unknown (rows made before, or a
-- configured provider without an issuer). A remote server's connection without one is used
-- until its token needs refreshing, then the user signs in again; it is never revoked anywhere.
ALTER TABLE connections ADD COLUMN issuer TEXT;
ALTER TABLE oauth_flows ADD COLUMN issuer TEXT;

// The OAuth counterpart of `reins mcp login` and of a run against a protected MCP server, on 127.0.0.1:
//  - a real authorization server: oidc-provider (PKCE S256 required, dynamic registration at /reg, rotated
//    refresh tokens, RFC 8414 metadata, resource indicators with JWT access tokens bound by `aud`), whose
//    interactions (login, consent) finish by themselves for the account "reins-test-user" — headless tests play
//    the browser;
//  - a protected MCP server (the official TypeScript SDK, stateless streamable HTTP at /mcp) that checks each
//    bearer JWT against the provider's keys, issuer and audience, publishes RFC 9728 protected-resource
//    metadata, and answers 401 with `WWW-Authenticate: Bearer ... resource_metadata=...` when the token is
//    missing, expired or revoked.
// Tools: `whoami` (answers the subject and the raw token it got: a server that echoes its token) and
// `revoke_my_token` (answers, then rejects the token of that call from now on: the next call gets a 401).
// Every request to /mcp is logged as a JSON line {status, jti} to $LOG. Prints {"issuer", "mcp"} once listening.
// Usage: REINS_OAUTH_NODE_MODULES=... LOG=... ACCESS_TTL=seconds node fixture.mjs
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.REINS_OAUTH_NODE_MODULES;
const load = (p) => import(pathToFileURL(path.join(modules, p)).href);
const { default: Provider } = await load('oidc-provider/lib/index.js');
const jose = await load('jose/dist/webapi/index.js');
const { McpServer } = await load('@modelcontextprotocol/sdk/dist/esm/server/mcp.js');
const { StreamableHTTPServerTransport } = await load('@modelcontextprotocol/sdk/dist/esm/server/streamableHttp.js');

const accessTtl = Number(process.env.ACCESS_TTL || 600);
const log = process.env.LOG;
const listen = (server) => new Promise((ok) => server.listen(0, '127.0.0.1', () => ok(server.address().port)));

const asServer = http.createServer();
const rsServer = http.createServer();
const asPort = await listen(asServer);
const rsPort = await listen(rsServer);
const issuer = `http://127.0.0.1:${asPort}`;
const resource = `http://127.0.0.1:${rsPort}/mcp`;
const metadataUrl = `http://127.0.0.1:${rsPort}/.well-known/oauth-protected-resource/mcp`;

const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
const signingKey = { ...(await jose.exportJWK(privateKey)), kid: 'fixture', alg: 'RS256', use: 'sig' };
const provider = new Provider(issuer, {
  jwks: { keys: [signingKey] },
  cookies: { keys: ['reins-oauth-fixture-cookie-key'] },
  scopes: ['openid', 'offline_access', 'mcp'],
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (_ctx, _client, oneOf) => oneOf ?? resource,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, indicator) => {
        if (indicator !== resource) throw new Provider.errors.InvalidTarget();
        return { scope: 'mcp', audience: resource, accessTokenTTL: accessTtl, accessTokenFormat: 'jwt' };
      },
    },
  },
  pkce: { required: () => true },
  // Every client that may refresh gets a refresh token (rotated on each use: public clients).
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  ttl: { AccessToken: accessTtl, RefreshToken: 3600 },
  findAccount: async (_ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
});

// Interactions finish by themselves: log in as the test user, grant what the client asked for.
async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params, session } = details;
  let result;
  if (prompt.name === 'login') {
    result = { login: { accountId: 'reins-test-user' } };
  } else {
    const grant = prompt.details.grantId
      ? await provider.Grant.find(prompt.details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
    for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes ?? {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    result = { consent: { grantId: await grant.save() } };
  }
  await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: true });
}

const providerCallback = provider.callback();
asServer.on('request', (req, res) => {
  if (req.url.startsWith('/interaction/')) {
    interaction(req, res).catch((e) => {
      res.statusCode = 500;
      res.end(String(e));
    });
    return;
  }
  providerCallback(req, res);
});

const jwks = jose.createRemoteJWKSet(new URL(`${issuer}/jwks`));
const revoked = new Set();

function record(entry) {
  if (log) fs.appendFileSync(log, `${JSON.stringify(entry)}\n`);
}

function challenge(res, error) {
  const reason = error ? `, error="${error}"` : '';
  res.writeHead(401, {
    'WWW-Authenticate': `Bearer realm="mcp", resource_metadata="${metadataUrl}"${reason}`,
    'Content-Type': 'application/json',
  });
  res.end(JSON.stringify({ error: error || 'unauthorized' }));
}

async function verify(req) {
  const header = req.headers.authorization || '';
  if (!header.startsWith('Bearer ')) return { error: null };
  const token = header.slice(7);
  try {
    const { payload } = await jose.jwtVerify(token, jwks, { issuer, audience: resource });
    if (revoked.has(payload.jti)) return { error: 'invalid_token' };
    return { token, payload };
  } catch {
    return { error: 'invalid_token' };
  }
}

function mcpServer(auth) {
  const server = new McpServer({ name: 'oauth-fixture', version: '1.0.0' });
  server.registerTool('whoami', { description: 'Who the bearer token says the caller is.' }, async () => ({
    content: [{ type: 'text', text: `subject ${auth.payload.sub}; token ${auth.token}` }],
  }));
  server.registerTool('revoke_my_token', { description: 'Rejects the token of this call from now on.' }, async () => {
    revoked.add(auth.payload.jti);
    return { content: [{ type: 'text', text: 'revoked' }] };
  });
  return server;
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : undefined;
}

rsServer.on('request', async (req, res) => {
  try {
    const url = new URL(req.url, `http://127.0.0.1:${rsPort}`);
    if (url.pathname.startsWith('/.well-known/oauth-protected-resource')) {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({
        resource,
        authorization_servers: [issuer],
        scopes_supported: ['mcp'],
        bearer_methods_supported: ['header'],
      }));
      return;
    }
    if (url.pathname !== '/mcp') {
      res.writeHead(404).end();
      return;
    }
    const body = req.method === 'POST' ? await readBody(req) : undefined;
    const auth = await verify(req);
    record({ method: req.method, rpc: body?.method ?? null, status: auth.token ? 200 : 401, jti: auth.payload?.jti ?? null });
    if (!auth.token) {
      challenge(res, auth.error);
      return;
    }
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    const server = mcpServer(auth);
    res.on('close', () => {
      transport.close();
      server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  } catch (e) {
    if (!res.headersSent) res.writeHead(500);
    res.end(String(e));
  }
});

process.stdout.write(`${JSON.stringify({ issuer, mcp: resource })}\n`);

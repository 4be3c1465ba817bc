// A real OpenID provider for llmgw's tests: oidc-provider (an OpenID Certified implementation of
// the provider side), configured for one confidential client and a few test accounts, with its
// own login and consent pages. tests/support/oidc_provider.py starts it; it is not for production.
//
// Usage:
//   node tests/oidc/provider.mjs --config CONFIG.json [--port N] [--exit-with-stdin]
//
// It listens on 127.0.0.1, on --port or else $OIDC_PROVIDER_PORT; 0 picks a free port. The issuer
// is http://127.0.0.1:PORT. Once it answers, it writes one line of JSON to stdout,
// {"issuer": "http://127.0.0.1:PORT"}, so a caller can wait for that line rather than poll; every
// other line it writes goes to stderr (one per request, and the provider's errors). It exits on
// SIGTERM or SIGINT and, with --exit-with-stdin, when its stdin closes, so that it dies with the
// test run that started it even when that run is killed.
//
// The config file (JSON, read once at start):
//   {
//     "client": {"client_id": "...", "client_secret": "...",
//                "redirect_uris": ["http://127.0.0.1:8080/console/oidc/callback"],
//                "post_logout_redirect_uris": [...],             // optional
//                "token_endpoint_auth_method": "client_secret_basic"},  // or client_secret_post
//     "accounts": [{"sub": "alice", "password": "...", "email": "alice@example.test",
//                   "email_verified": true, "name": "Alice", "groups": ["llmgw-admins"]}],
//     "ttl": {"id_token": 3600, "session": 86400, "access_token": 3600,  // seconds, all optional
//             "authorization_code": 60, "interaction": 600, "grant": 86400},
//     "admin_token": "..."                                            // for /__test/ below
//   }
// oidc-provider holds a client to the one token endpoint auth method it registered (it refuses a
// client_secret_post request from a client_secret_basic client), so the method is part of the
// config: both are supported and advertised, and a test picks the one its client uses.
//
// The client must use PKCE with S256 (a request without code_challenge is refused). ID tokens are
// signed with RS256 by an RSA key generated at start (published at /jwks, as discovery says) and
// carry the claims of the scopes asked for: openid -> sub, email -> email and email_verified,
// profile -> name, groups -> groups. An account without email_verified gets a token without
// that claim (a provider that does not say).
//
// Sign-in: /interaction/UID shows a login form (input[name=login] takes the sub or the email,
// input[name=password], a submit button #sign-in); a wrong login or password shows the form
// again with status 401. Then a consent page: button #consent allows, #deny refuses. Sign-out
// (RP-initiated logout, discovery's end_session_endpoint) asks first: button #sign-out.
//
// Changing users while it runs: a small admin API on the same port, each call with
// "Authorization: Bearer ADMIN_TOKEN" (the config's admin_token), answering JSON:
//   GET    /__test/accounts                 every account
//   PUT    /__test/accounts/SUB             body: the account's fields (sub comes from the path);
//                                           adds or replaces it, say to demote it (other groups);
//                                           its sessions stay, its next tokens carry the new claims
//   DELETE /__test/accounts/SUB             removes it and ends its sessions; a new sign-in fails
//   POST   /__test/accounts/SUB/logout      ends its sessions at the provider: {"ended": N}
// A call returns once its change is made, so a test needs no wait after it.

import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

const log = (...parts) => console.error('[oidc-provider]', ...parts);

const { values: args } = parseArgs({
  options: {
    config: { type: 'string' },
    port: { type: 'string' },
    'exit-with-stdin': { type: 'boolean', default: false },
  },
});
if (!args.config) {
  log('usage: node provider.mjs --config CONFIG.json [--port N] [--exit-with-stdin]');
  process.exit(2);
}
const portArg = args.port ?? process.env.OIDC_PROVIDER_PORT;
if (portArg === undefined || !/^\d+$/.test(portArg)) {
  log('a port is needed: --port N or OIDC_PROVIDER_PORT (0 picks a free one)');
  process.exit(2);
}

const config = JSON.parse(readFileSync(args.config, 'utf8'));
const accounts = new Map((config.accounts ?? []).map((a) => [a.sub, { ...a }]));
const adminToken = config.admin_token;
const ttl = config.ttl ?? {};

// The store of sessions, grants, codes and tokens: oidc-provider's own in-memory adapter keeps
// its entries where nothing else can list them, and ending a user's sessions needs to find them.
const stores = new Map();
class MemoryAdapter {
  constructor(model) {
    this.model = model;
    if (!stores.has(model)) stores.set(model, new Map());
    this.entries = stores.get(model);
  }

  async upsert(id, payload, expiresIn) {
    const expiresAt = expiresIn ? Date.now() + expiresIn * 1000 : Infinity;
    this.entries.set(id, { payload, expiresAt });
  }

  async find(id) {
    const entry = this.entries.get(id);
    if (!entry) return undefined;
    if (entry.expiresAt <= Date.now()) {
      this.entries.delete(id);
      return undefined;
    }
    return entry.payload;
  }

  async findByUid(uid) {
    for (const [id, entry] of this.entries) {
      if (entry.payload.uid === uid) return this.find(id);
    }
    return undefined;
  }

  async findByUserCode(userCode) {
    for (const [id, entry] of this.entries) {
      if (entry.payload.userCode === userCode) return this.find(id);
    }
    return undefined;
  }

  async consume(id) {
    const entry = this.entries.get(id);
    if (entry) entry.payload.consumed = Math.floor(Date.now() / 1000);
  }

  async destroy(id) {
    this.entries.delete(id);
  }

  async revokeByGrantId(grantId) {
    for (const entries of stores.values()) {
      for (const [id, entry] of entries) {
        if (entry.payload.grantId === grantId) entries.delete(id);
      }
    }
  }
}

// Ends every session of one account: its next authorization request asks it to sign in again.
function endSessions(sub) {
  const sessions = stores.get('Session') ?? new Map();
  let ended = 0;
  for (const [id, entry] of sessions) {
    if (entry.payload.accountId === sub) {
      sessions.delete(id);
      ended += 1;
    }
  }
  log(`ended ${ended} session(s) of ${sub}`);
  return ended;
}

const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => (
  { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));

function page(res, status, title, body) {
  res.statusCode = status;
  res.setHeader('Content-Type', 'text/html; charset=utf-8');
  res.setHeader('Cache-Control', 'no-store');
  res.end(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>${escapeHtml(title)}</title></head>
<body><h1>${escapeHtml(title)}</h1>
${body}
</body></html>
`);
}

function loginPage(res, uid, { status = 200, login = '', error = '' } = {}) {
  page(res, status, 'Sign in', `${error ? `<p id="error">${escapeHtml(error)}</p>` : ''}
<form method="post" action="/interaction/${escapeHtml(uid)}/login">
  <label>Login <input name="login" value="${escapeHtml(login)}" autofocus></label>
  <label>Password <input type="password" name="password"></label>
  <button type="submit" id="sign-in">Sign in</button>
</form>`);
}

function consentPage(res, uid, clientId, scope) {
  page(res, 200, 'Authorize', `<p>${escapeHtml(clientId)} asks for: <span id="scope">${escapeHtml(scope)}</span></p>
<form method="post" action="/interaction/${escapeHtml(uid)}/confirm">
  <button type="submit" id="consent">Allow</button>
</form>
<form method="post" action="/interaction/${escapeHtml(uid)}/abort">
  <button type="submit" id="deny">Deny</button>
</form>`);
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

function findLogin(login) {
  if (accounts.has(login)) return accounts.get(login);
  const email = login.toLowerCase();
  for (const account of accounts.values()) {
    if (typeof account.email === 'string' && account.email.toLowerCase() === email) return account;
  }
  return undefined;
}

// The login and consent pages, on oidc-provider's interaction API.
async function interaction(provider, req, res, path) {
  const [, uid, action] = path.match(/^\/interaction\/([^/]+)(?:\/(login|confirm|abort))?$/) ?? [];
  if (!uid) return page(res, 404, 'Not found', '');
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) return page(res, 400, 'Bad request', '<p>interaction mismatch</p>');
  const { prompt, params, session, grantId } = details;

  if (req.method === 'GET' && !action) {
    if (prompt.name === 'login') return loginPage(res, uid);
    if (prompt.name === 'consent') return consentPage(res, uid, params.client_id, params.scope);
    return page(res, 501, 'Not implemented', `<p>prompt ${escapeHtml(prompt.name)}</p>`);
  }
  if (req.method !== 'POST') return page(res, 405, 'Method not allowed', '');

  if (action === 'login') {
    const form = new URLSearchParams(await readBody(req));
    const login = form.get('login') ?? '';
    const account = findLogin(login);
    if (!account || typeof account.password !== 'string' || form.get('password') !== account.password) {
      log(`sign-in refused for ${JSON.stringify(login)}`);
      return loginPage(res, uid, { status: 401, login, error: 'Wrong login or password.' });
    }
    log(`signed in ${account.sub}`);
    return provider.interactionFinished(req, res, { login: { accountId: account.sub } },
      { mergeWithLastSubmission: false });
  }
  if (action === 'confirm') {
    if (prompt.name !== 'consent') return page(res, 400, 'Bad request', '<p>no consent asked</p>');
    const grant = grantId ? await provider.Grant.find(grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    const { missingOIDCScope, missingOIDCClaims, missingResourceScopes } = prompt.details;
    if (missingOIDCScope) grant.addOIDCScope(missingOIDCScope.join(' '));
    if (missingOIDCClaims) grant.addOIDCClaims(missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(missingResourceScopes ?? {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    return provider.interactionFinished(req, res, { consent: { grantId: await grant.save() } },
      { mergeWithLastSubmission: true });
  }
  return provider.interactionFinished(req, res,
    { error: 'access_denied', error_description: 'End-User refused the request' },
    { mergeWithLastSubmission: false });
}

function json(res, status, body) {
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json');
  res.end(body === undefined ? '' : JSON.stringify(body));
}

// The admin API for tests (see the header).
async function admin(req, res, path) {
  if (!adminToken || req.headers.authorization !== `Bearer ${adminToken}`) {
    return json(res, 401, { error: 'admin token missing or wrong' });
  }
  if (path === '/__test/accounts' && req.method === 'GET') {
    return json(res, 200, [...accounts.values()]);
  }
  const match = path.match(/^\/__test\/accounts\/([^/]+)(\/logout)?$/);
  if (!match) return json(res, 404, { error: 'no such admin route' });
  const sub = decodeURIComponent(match[1]);
  if (match[2]) {
    if (req.method !== 'POST') return json(res, 405, { error: 'POST only' });
    return json(res, 200, { ended: endSessions(sub) });
  }
  if (req.method === 'PUT') {
    const account = { ...JSON.parse(await readBody(req)), sub };
    accounts.set(sub, account);
    log(`account ${sub} set`);
    return json(res, 200, account);
  }
  if (req.method === 'DELETE') {
    const existed = accounts.delete(sub);
    log(`account ${sub} ${existed ? 'removed' : 'was not there'}`);
    return json(res, existed ? 200 : 404, { removed: existed, ended: endSessions(sub) });
  }
  return json(res, 405, { error: 'GET, PUT, DELETE or POST .../logout' });
}

function providerFor(issuer) {
  const clientConfig = config.client;
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };

  const provider = new Provider(issuer, {
    adapter: MemoryAdapter,
    clients: [{
      client_id: clientConfig.client_id,
      client_secret: clientConfig.client_secret,
      redirect_uris: clientConfig.redirect_uris,
      post_logout_redirect_uris: clientConfig.post_logout_redirect_uris ?? [],
      token_endpoint_auth_method: clientConfig.token_endpoint_auth_method ?? 'client_secret_basic',
      grant_types: ['authorization_code'],
      response_types: ['code'],
      id_token_signed_response_alg: 'RS256',
    }],
    clientAuthMethods: ['client_secret_basic', 'client_secret_post'],
    responseTypes: ['code'],
    pkce: { methods: ['S256'], required: () => true },
    jwks: { keys: [signingKey] },
    cookies: {
      keys: [randomBytes(32).toString('hex')],
      // oidc-provider 8 marks its session cookie SameSite=None, which a browser drops unless it
      // is also Secure, and this provider speaks plain http: lax keeps the session across the
      // top-level redirects of the code flow.
      long: { httpOnly: true, sameSite: 'lax' },
      short: { httpOnly: true, sameSite: 'lax' },
    },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name'],
      groups: ['groups'],
    },
    // The claims of the granted scopes go into the ID token itself, not only to userinfo.
    conformIdTokenClaims: false,
    async findAccount(ctx, sub) {
      const account = accounts.get(sub);
      if (!account) return undefined;
      return {
        accountId: sub,
        async claims() {
          const claims = { sub, email: account.email, name: account.name,
                           groups: account.groups ?? [] };
          if (account.email_verified !== undefined) claims.email_verified = account.email_verified;
          return claims;
        },
      };
    },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    features: {
      devInteractions: { enabled: false },
      rpInitiatedLogout: {
        enabled: true,
        async logoutSource(ctx, form) {
          ctx.body = `<!DOCTYPE html><html><head><title>Sign out</title></head><body>
<h1>Sign out</h1>${form}<button type="submit" form="op.logoutForm" name="logout" value="yes"
id="sign-out">Sign out</button></body></html>`;
        },
      },
    },
    async renderError(ctx, out) {
      ctx.type = 'html';
      ctx.body = `<!DOCTYPE html><html><head><title>Error</title></head><body><h1>Error</h1>
<p id="error">${escapeHtml(out.error)}</p><p id="error_description">${escapeHtml(out.error_description ?? '')}</p>
</body></html>`;
    },
    ttl: {
      IdToken: ttl.id_token ?? 3600,
      Session: ttl.session ?? 86400,
      AccessToken: ttl.access_token ?? 3600,
      AuthorizationCode: ttl.authorization_code ?? 60,
      Interaction: ttl.interaction ?? 600,
      Grant: ttl.grant ?? 86400,
    },
  });

  for (const event of ['server_error', 'authorization.error', 'grant.error', 'end_session.error',
    'userinfo.error', 'jwks.error', 'discovery.error']) {
    provider.on(event, (...eventArgs) => {
      const err = eventArgs.find((a) => a instanceof Error);
      // error_detail says what was wrong where error_description stays generic ("grant
      // request is invalid" for a wrong code_verifier, say).
      const detail = [err?.error_description, err?.error_detail].filter(Boolean).join('; ');
      log(event, err ? `${err.name}: ${err.message}${detail ? ` (${detail})` : ''}` : '');
    });
  }
  return provider;
}

const server = createServer();
server.listen(Number(portArg), '127.0.0.1', () => {
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  const provider = providerFor(issuer);
  const handle = provider.callback();

  server.on('request', (req, res) => {
    const path = new URL(req.url, issuer).pathname;
    res.on('finish', () => log(`${req.method} ${path} ${res.statusCode}`));
    let route;
    if (path.startsWith('/interaction/')) route = interaction(provider, req, res, path);
    else if (path.startsWith('/__test/')) route = admin(req, res, path);
    else return handle(req, res);
    route.catch((err) => {
      log(`${req.method} ${path} failed:`, err);
      if (!res.headersSent) page(res, err.statusCode ?? 500, 'Error', `<p id="error">${escapeHtml(err.message)}</p>`);
      else res.destroy();
    });
    return undefined;
  });

  log(`issuer ${issuer}, client ${config.client.client_id}, ${accounts.size} account(s)`);
  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
});
server.on('error', (err) => {
  log('cannot listen:', err.message);
  process.exit(1);
});

function stop(why) {
  log(`stopping (${why})`);
  server.close();
  server.closeAllConnections?.();
  process.exit(0);
}
process.on('SIGTERM', () => stop('SIGTERM'));
process.on('SIGINT', () => stop('SIGINT'));
if (args['exit-with-stdin']) {
  process.stdin.on('end', () => stop('stdin closed'));
  process.stdin.on('error', () => stop('stdin failed'));
  process.stdin.resume();
}

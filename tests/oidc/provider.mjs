// A real OpenID provider on loopback for the sign-in tests (issue 48): panva's oidc-provider with
// its development login form (any password; the login names the account) and two test users.
// node provider.mjs PORT CONSOLE_URL  ->  issuer http://127.0.0.1:PORT, client "tfconsole" / "s3cret"
import Provider from 'oidc-provider';

const [port, consoleUrl] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;
const USERS = {
  alice: { email: 'alice@example.org', name: 'Alice', groups: ['ml-team'] },   // an operator
  carol: { email: 'carol@example.org', name: 'Carol', groups: ['watchers'] },  // a viewer
};

const provider = new Provider(issuer, {
  clients: [{
    client_id: 'tfconsole',
    client_secret: 's3cret',
    redirect_uris: [`${consoleUrl}/oauth2callback`],
    post_logout_redirect_uris: [`${consoleUrl}/oauth2callback`],   // where st.logout comes back
  }],
  // Streamlit reads the person from the ID token (Authlib's userinfo), not the userinfo endpoint.
  conformIdTokenClaims: false,
  claims: { openid: ['sub'], email: ['email', 'email_verified', 'groups'], profile: ['name'] },
  async findAccount(ctx, id) {
    if (!USERS[id]) return undefined;
    return { accountId: id, async claims() { return { sub: id, email_verified: true, ...USERS[id] }; } };
  },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  cookies: { keys: ['tests-only-not-a-secret'] },
});
provider.listen(Number(port), '127.0.0.1', () => console.log(`oidc-provider ready at ${issuer}`));

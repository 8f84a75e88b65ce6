// Plays the browser of `reins mcp login`: opens the authorization URL, follows redirects by hand (carrying the
// authorization server's cookies, as a browser does) through the provider's interactions, and finally opens the
// loopback redirect of Reins. Prints the last page's status and body. Usage: node browser.mjs URL
const start = new URL(process.argv[2]);
const jar = new Map();
let url = start;
for (let hop = 0; hop < 20; hop += 1) {
  const headers = {};
  if (url.origin === start.origin && jar.size) {
    headers.cookie = [...jar].map(([k, v]) => `${k}=${v}`).join('; ');
  }
  const res = await fetch(url, { redirect: 'manual', headers });
  if (url.origin === start.origin) {
    for (const cookie of res.headers.getSetCookie()) {
      const [pair] = cookie.split(';');
      const at = pair.indexOf('=');
      jar.set(pair.slice(0, at).trim(), pair.slice(at + 1));
    }
  }
  const location = res.headers.get('location');
  if (res.status >= 300 && res.status < 400 && location) {
    url = new URL(location, url);
    continue;
  }
  process.stdout.write(`${res.status} ${await res.text()}\n`);
  process.exit(res.ok ? 0 : 1);
}
process.stdout.write('too many redirects\n');
process.exit(1);

// Preloaded (node --import) into the conformance CLI when the endpoint under test wants a key:
// the CLI has no option for headers, so every request it makes, through fetch or undici's
// request, carries `Authorization: Bearer $MCP_CONFORMANCE_BEARER` unless it set one itself.
import { Agent, setGlobalDispatcher } from "undici";

const token = process.env.MCP_CONFORMANCE_BEARER;
if (token) {
  const withBearer = (dispatch) => (opts, handler) => {
    const headers = opts.headers ?? {};
    const value = `Bearer ${token}`;
    let next;
    if (Array.isArray(headers)) {
      const names = headers.filter((_, i) => i % 2 === 0).map((h) => String(h).toLowerCase());
      next = names.includes("authorization") ? headers : [...headers, "authorization", value];
    } else if (typeof headers[Symbol.iterator] === "function") {
      const pairs = [...headers];
      next = pairs.some(([k]) => String(k).toLowerCase() === "authorization")
        ? pairs : [...pairs, ["authorization", value]];
    } else {
      const has = Object.keys(headers).some((k) => k.toLowerCase() === "authorization");
      next = has ? headers : { ...headers, authorization: value };
    }
    return dispatch({ ...opts, headers: next }, handler);
  };
  setGlobalDispatcher(new Agent().compose(withBearer));
}

// Preloaded into a third-party Node server (node --require this-file ...) that listens on every
// interface when given only a port, as the "everything" server's streamableHttp mode does: the
// tests serve on 127.0.0.1 only, so a listen() without a host gets that one.
"use strict";
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if ((typeof args[0] === "number" || typeof args[0] === "string") && (args.length === 1 || typeof args[1] === "function")) {
    args.splice(1, 0, "127.0.0.1");
  } else if (args[0] && typeof args[0] === "object" && !args[0].host && !args[0].path) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};

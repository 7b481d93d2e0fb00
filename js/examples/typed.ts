// SPDX-License-Identifier: Apache-2.0
// Typed calls: api.ts comes from the server's OpenRPC document.
//
//   npx ucall-codegen http://127.0.0.1:8545 -o api.ts   (or a saved openrpc.json)
import { connect } from "./api.js";

const client = connect("http://127.0.0.1:8545/");
const total: number = await client.methods.sum({ a: 1, b: 2 }); // checked by tsc
console.log(total);
client.close();

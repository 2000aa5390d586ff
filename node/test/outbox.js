'use strict';
// The package under test: the copy installed from the tarball into OUTBOX_NODE_PROJECT
// (scripts/test_node.sh: `npm install <tarball> pg --ignore-scripts`), so the tests run what users
// install. Without it, this folder (a development build: `npm run build` in node/).
const path = require('path');

const project = process.env.OUTBOX_NODE_PROJECT || null;
const dir = project ? path.join(project, 'node_modules', 'outbox') : path.join(__dirname, '..');

module.exports = { outbox: require(dir), dir, project };

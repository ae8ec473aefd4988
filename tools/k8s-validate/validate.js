// Validates Kubernetes objects (multi-document YAML, as `kubectl kustomize`
// prints them) against the Kubernetes schemas of the kubernetes-models
// package: each object by its apiVersion and kind. Prints one line per object;
// exits 1 naming every object that fails and why.
// Usage: node validate.js FILE.yaml
'use strict';
const fs = require('fs');
const yaml = require('js-yaml');

const file = process.argv[2];
const docs = yaml.loadAll(fs.readFileSync(file, 'utf8')).filter((d) => d != null);
let failed = 0;
for (const doc of docs) {
  const name = `${doc.kind || '?'} ${(doc.metadata && doc.metadata.name) || '?'}`;
  let model;
  try {
    model = require(`kubernetes-models/${doc.apiVersion}`)[doc.kind];
  } catch (e) {
    model = undefined;
  }
  if (typeof model !== 'function') {
    console.log(`FAIL ${name}: no schema for ${doc.apiVersion} ${doc.kind}`);
    failed++;
    continue;
  }
  try {
    new model(doc).validate();
    console.log(`ok   ${name} (${doc.apiVersion})`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.message}`);
    failed++;
  }
}
if (docs.length === 0) {
  console.log(`FAIL ${file}: no objects`);
  failed++;
}
process.exit(failed ? 1 : 0);

#!/bin/bash
# Runs once, when the db service's volume is new (the official postgres image and the local one
# both run /docker-entrypoint-initdb.d): the role the Farm nodes log in as, and the farm database.
# The role is no superuser but has CREATEDB: each message container is a database of its own,
# created next to the farm database as <farm database>_container_<n>.
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  --set=farm_user="${FARM_DB_USER:-farm}" --set=farm_password="${FARM_DB_PASSWORD:?FARM_DB_PASSWORD must be set}" \
  --set=farm_db="${FARM_DB_NAME:-farm}" <<'SQL'
CREATE ROLE :"farm_user" LOGIN CREATEDB PASSWORD :'farm_password';
CREATE DATABASE :"farm_db" OWNER :"farm_user";
SQL
echo "10-farm.sh: role ${FARM_DB_USER:-farm} (LOGIN CREATEDB) and database ${FARM_DB_NAME:-farm} created"
